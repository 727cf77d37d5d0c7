// Command build-helm builds (once) the helm binary the chart's tests run, into bin/helm-<version>/
// at the repository root, and prints its path. Tests build it on first use anyway; running this
// first (make helm-binary) keeps that wait out of a test's timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/helm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	p, err := helm.EnsureBinary(ctx, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-helm: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(p)
}
