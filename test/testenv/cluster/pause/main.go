// Command pause is the pod sandbox's process of the one-node cluster (test/testenv/cluster):
// it waits for SIGTERM or SIGINT and exits. No registry is reachable from the test machines, so
// the cluster builds its "pause" image from this instead of pulling registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
