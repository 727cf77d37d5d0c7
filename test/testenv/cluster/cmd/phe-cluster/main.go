// Command phe-cluster is what make cluster runs: a one-node Kubernetes of real parts on this
// machine (test/testenv/cluster), with the exporter's image (make image) loaded under the
// chart's default reference. It prints "ready" and what to try, runs until SIGTERM or Ctrl-C,
// then stops everything and removes what the parts left on the host.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/cluster"
)

func main() { os.Exit(run()) }

func run() int {
	dir := flag.String("dir", ".build/cluster", "the cluster's directory (every file it writes, its kubeconfig)")
	image := flag.String("image", ".build/image", "the OCI image layout make image writes; empty: load no exporter image")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "phe-cluster:", err)
		return 1
	}
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "phe-cluster:", err)
		return 1
	}
	ref, err := cluster.ChartImage(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "phe-cluster:", err)
		return 1
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	c, err := cluster.Start(ctx, cluster.Options{Dir: absDir, Root: root, ImageLayout: *image, ImageName: ref, Logf: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "phe-cluster:", err)
		return 1
	}
	rel, _ := filepath.Rel(root, c.Kubeconfig)
	fmt.Printf("ready\n\n"+
		"  export KUBECONFIG=%s\n"+
		"  kubectl get nodes -o wide\n"+
		"  kubectl create clusterrolebinding phe-view --clusterrole=view --serviceaccount=default:phe-provider-health-exporter\n"+
		"  bin/helm-*/helm install phe %s --set replicas=3 --set-json 'config.providers=[{\"name\":\"cluster-main\",\"type\":\"kubernetes\",\"kubernetes\":{}}]'\n"+
		"  kubectl get pods,ph\n\n"+
		"The image %s is loaded. Ctrl-C stops the cluster and removes everything it made.\n", rel, cluster.ChartDir, ref)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "phe-cluster: stopping")
	cerr := c.Close()
	left := c.Leftovers()
	if cerr != nil {
		fmt.Fprintln(os.Stderr, "phe-cluster:", cerr)
	}
	for _, l := range left {
		fmt.Fprintln(os.Stderr, "phe-cluster: left behind:", l)
	}
	if cerr != nil || len(left) > 0 {
		return 1
	}
	fmt.Fprintln(os.Stderr, "phe-cluster: stopped; nothing left behind")
	return 0
}
