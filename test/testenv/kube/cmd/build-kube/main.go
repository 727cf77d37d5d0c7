// Command build-kube builds (once) the kube-apiserver and etcd binaries the integration tests
// run, into bin/kube-<version>/ at the repository root, and prints their paths. Tests build
// them on first use anyway; running this first keeps that wait out of a test's timeout. With
// -node it builds (once) the rest of a one-node cluster as well: kube-controller-manager,
// kube-scheduler, kubelet and kube-proxy, into bin/kube-node-<version>/ (make cluster).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

func main() {
	node := flag.Bool("node", false, "also build kube-controller-manager, kube-scheduler, kubelet and kube-proxy")
	flag.Parse()
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
	if !*node {
		return
	}
	nb, err := kube.EnsureNodeBinaries(ctx, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-kube: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(nb.ControllerManager)
	fmt.Println(nb.Scheduler)
	fmt.Println(nb.Kubelet)
	fmt.Println(nb.Proxy)
}
