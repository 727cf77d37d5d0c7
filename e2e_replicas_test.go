package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/demo"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/promstack"
)

// failoverBound is how long after the leader is killed the other replica must have taken over
// the writes: docs/crd.md's worst case with the default lease timings (a 15s lease plus 4.4
// retry periods of 2s, 23.8s, counted from the dead leader's last renewal, which comes before
// the kill), plus one second for client-go's one-second Lease precision and this test's polling.
// docs/testing.md states the same figure.
const failoverBound = 25 * time.Second

// replica is one exporter process of the end-to-end test: the built binary.
type replica struct {
	name string
	addr string
	d    *testenv.Daemon
}

func (r *replica) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return ""
	}
	return string(b)
}

// leader reports whether the replica says it writes the ProviderHealth objects.
func (r *replica) leader(t *testing.T) bool {
	v, ok := metric(t, r.metrics(t), "proxy_operator_crd_writer_leader")
	return ok && v == 1
}

func startReplica(t *testing.T, name, bin string, args ...string) *replica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logPath := filepath.Join(t.TempDir(), name+".log")
	d, err := testenv.StartDaemon(name, bin, append([]string{"--web.listen-address=" + addr, "--log.level=debug"}, args...), logPath)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, addr: addr, d: d}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", name, logPath, d.LogTail(60))
		}
		if err := d.Kill(30 * time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	waitFor(t, 60*time.Second, name+" to be ready", func() bool {
		if d.Exited() {
			t.Fatalf("%s exited at start (%v):\n%s", name, d.WaitErr(), d.LogTail(40))
		}
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return r
}

// TestEndToEndReplicas runs the built exporter binary as a Deployment runs it: two replicas with
// leader election, the CRD writer on, against the whole test environment (the API server, three
// KVM hosts, the GCE wire server), scraped by a real Prometheus. It checks every target is up in
// Prometheus and every provider Ready in kubectl; a real fault on a host (sshd stopped, its
// connections cut) shows in the object with its reason and clears after the repair; and when the
// leader is killed the other replica takes over the writes within the documented bound.
func TestEndToEndReplicas(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH")
	}
	env := demo.Start(t, demo.Options{CRDFile: filepath.Join("deploy", "crd", "providerhealth.io_providerhealths.yaml"), KVMHosts: 3})
	bin := demo.BuildExporter(t, ".")
	args := []string{"--config.file=" + env.ProvidersFile, "--provider-check-interval=10s",
		"--crd.enabled", "--crd.leader-elect", "--crd.kubeconfig=" + env.Kube.Kubeconfig, "--crd.lease-namespace=default"}
	replicas := []*replica{startReplica(t, "replica-a", bin, args...), startReplica(t, "replica-b", bin, args...)}

	stack := promstack.Start(t, promstack.Options{ScrapeTargets: []string{replicas[0].addr, replicas[1].addr}})
	for _, r := range replicas {
		stack.WaitTargetUp(t, r.addr, 60*time.Second)
	}
	// Every target of every provider up, as each replica reports it.
	stack.WaitForQuery(t, `count by (instance) (proxy_operator_provider_target_up == 1)`, func(s []promstack.Sample) bool {
		if len(s) != 2 {
			return false
		}
		for _, x := range s {
			if int(x.Value) != env.Targets() {
				return false
			}
		}
		return true
	}, 60*time.Second)

	ph := func() map[string]string {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kube.Kubeconfig, "get", "ph", "--no-headers").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get ph: %v\n%s", err, out)
		}
		rows := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) >= 4 {
				rows[f[0]] = strings.Join(f[1:4], " ")
			}
		}
		return rows
	}
	waitPH := func(what string, want map[string]string) {
		t.Helper()
		var rows map[string]string
		deadline := time.Now().Add(60 * time.Second)
		for {
			rows = ph()
			ok := len(rows) == len(want)
			for name, w := range want {
				ok = ok && rows[name] == w
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubectl get ph: %v, want %v (%s)", rows, want, what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	allReady := map[string]string{demo.KubernetesProvider: "True AllTargetsReady 1/1", demo.GCPProvider: "True AllTargetsReady 1/1",
		demo.KVMProvider: fmt.Sprintf("True AllTargetsReady %d/%d", len(env.Fleet.Hosts), len(env.Fleet.Hosts))}
	waitPH("every provider ready", allReady)

	var leaders []*replica
	for _, r := range replicas {
		if r.leader(t) {
			leaders = append(leaders, r)
		}
	}
	if len(leaders) != 1 {
		t.Fatalf("%d replicas say they write the objects, want exactly 1", len(leaders))
	}
	leader := leaders[0]

	// A real fault: sshd stops on one host and its connections are cut (as when the host goes
	// down); both replicas read TCPUnreachable, and the object says so.
	down := env.Fleet.Hosts[2]
	down.StopSSHD()
	down.KillSSHConnections()
	kvmDown := fmt.Sprintf("False TCPUnreachable %d/%d", len(env.Fleet.Hosts)-1, len(env.Fleet.Hosts))
	waitPH("a host whose sshd is stopped", map[string]string{demo.KubernetesProvider: allReady[demo.KubernetesProvider],
		demo.GCPProvider: allReady[demo.GCPProvider], demo.KVMProvider: kvmDown})
	stack.WaitForQuery(t, fmt.Sprintf(`proxy_operator_provider_target_reason{provider=%q,target=%q,reason="TCPUnreachable"} == 1`, demo.KVMProvider, down.Name),
		func(s []promstack.Sample) bool { return len(s) == 2 }, 60*time.Second)
	down.StartSSHD()
	waitPH("the host's sshd restarted", allReady)

	// The leader dies without handing the lease back; the other replica takes over the writes.
	var follower *replica
	for _, r := range replicas {
		if r != leader {
			follower = r
		}
	}
	killed := time.Now()
	if err := leader.d.Kill(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*failoverBound, "the other replica to take over", func() bool { return follower.leader(t) })
	took := time.Since(killed)
	t.Logf("the other replica took over %s after the leader was killed", took.Round(100*time.Millisecond))
	if took > failoverBound {
		t.Errorf("the other replica took over %s after the leader was killed, want at most %s (docs/crd.md)", took.Round(100*time.Millisecond), failoverBound)
	}
	// It writes: a new fault reaches the object.
	env.Fleet.Hosts[0].StopLibvirtd()
	waitFor(t, 60*time.Second, "the new leader to write the new fault", func() bool {
		return strings.HasPrefix(ph()[demo.KVMProvider], "False Libvirt")
	})
}
