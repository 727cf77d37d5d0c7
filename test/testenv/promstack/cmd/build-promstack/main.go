// Command build-promstack builds (once) the Prometheus, promtool, Alertmanager and amtool
// binaries the integration tests and the mixin's rule tests run, into bin/prometheus-<version>+<tags>/
// and bin/alertmanager-<version>/ at the repository root, and prints their paths. Tests build
// them on first use anyway; running this first (make prom-binaries) keeps that wait out of a
// test's timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	b, err := promstack.EnsureBinaries(ctx, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-promstack: %v\n", err)
		os.Exit(1)
	}
	for _, p := range []string{b.Prometheus, b.Promtool, b.Alertmanager, b.Amtool} {
		fmt.Println(p)
	}
}
