package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestSIGTERMWithAFrozenAPIServer: a sharded replica that also writes the ProviderHealth objects
// exits within 10 s of SIGTERM, with status 0, when the API server stops answering just before:
// its shard's release and delete and the writer's release are each bounded by the exit's own
// deadline, not by their renew deadlines.
func TestSIGTERMWithAFrozenAPIServer(t *testing.T) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	relay := testutil.NewRelay(t, strings.TrimPrefix(env.URL, "https://"), 0)
	raw, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	testutil.ReplaceFile(t, kubeconfig, strings.ReplaceAll(string(raw), env.URL, "https://"+relay.Addr()))
	providers := filepath.Join(t.TempDir(), "providers.yml")
	testutil.ReplaceFile(t, providers, `providers:
- name: lab
  type: kvm
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hosts: [{address: "127.0.0.1:1", name: hv1}]
`)
	// The binary is built with -race, whose runtime sleeps a second at exit (GORACE
	// atexit_sleep_ms, 1000 by default): not the exporter's time.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	x := startProcess(t, "--config.file="+providers, "--provider-check-interval=10s",
		"--shard.enabled", "--shard.identity=phe-0", "--shard.kubeconfig="+kubeconfig, "--shard.lease-namespace=default",
		"--crd.enabled", "--crd.kubeconfig="+kubeconfig, "--crd.leader-elect", "--crd.lease-namespace=default")
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)
	testutil.Eventually(t, time.Minute, "the replica's Lease and the writer's", func() bool {
		ls, err := admin.CoordinationV1().Leases("default").List(t.Context(), metav1.ListOptions{})
		return err == nil && len(ls.Items) == 2
	})
	testutil.Eventually(t, time.Minute, "the replica to be ready", func() bool {
		code, _ := x.get("/-/ready")
		return code == 200
	})
	relay.Freeze()
	start := time.Now()
	x.signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { x.proc.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("the exporter did not exit within 15s of SIGTERM; logs:\n%s", x.logs.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the exporter exited %s after SIGTERM, want at most 10s; logs:\n%s", took.Round(time.Millisecond), x.logs.String())
	}
	if code := x.proc.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0; logs:\n%s", code, x.logs.String())
	}
}
