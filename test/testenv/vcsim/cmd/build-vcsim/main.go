// Command build-vcsim builds (once) the vCenter simulator the integration tests run, into
// bin/vcsim-<hash>-<govmomi version>/ at the repository root, and prints its path. make
// test-env runs it, so that the tests find the simulator built.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	p, err := vcsim.EnsureBinary(ctx, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-vcsim: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(p)
}
