// Command build-kube builds (once) the kube-apiserver and etcd binaries the integration tests
// run, into bin/kube-<version>/ at the repository root, and prints their paths. Tests build
// them on first use anyway; running this first keeps that wait out of a test's timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kube"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	apiserver, etcd, err := kube.EnsureBinaries(ctx, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-kube: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(apiserver)
	fmt.Println(etcd)
}
