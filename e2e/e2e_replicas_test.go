package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/demo"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
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
	v, ok := testutil.Metric(t, r.metrics(t), "proxy_operator_crd_writer_leader")
	return ok && v == 1
}

func startReplica(t *testing.T, name, bin string, args ...string) *replica {
	t.Helper()
	addr := testutil.MustFreeLoopbackAddr(t)
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
	testutil.Eventually(t, 60*time.Second, name+" to be ready", func() bool {
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
	env := demo.Start(t, demo.Options{CRDFile: repoFile("deploy", "crd"), KVMHosts: 3})
	bin := binary(t)
	args := []string{"--config.file=" + env.ProvidersFile, "--provider-check-interval=10s",
		"--crd.enabled", "--crd.leader-elect", "--crd.kubeconfig=" + env.Kube.Kubeconfig, "--crd.lease-namespace=default"}
	replicas := []*replica{startReplica(t, "replica-a", bin, args...), startReplica(t, "replica-b", bin, args...)}

	// The mixin's rules with test-sized windows, set through its _config. The availability
	// groups sample, bucket and evaluate every 15s instead of 1m, 1h and 5m, so the dashboard's
	// availability panels have data by the time their queries run below.
	rules := demo.MixinRules(t, repoRoot, `{targetDownFor: "10s", providerDownFor: "10s", availabilityInterval: "15s", availabilityBucket: "15s", availabilityEvaluationInterval: "15s"}`)
	stack := promstack.Start(t, promstack.Options{ScrapeTargets: []string{replicas[0].addr, replicas[1].addr}, RuleFiles: rules})
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
		demo.KVMProvider:     fmt.Sprintf("True AllTargetsReady %d/%d", len(env.Fleet.Hosts), len(env.Fleet.Hosts)),
		demo.VSphereProvider: fmt.Sprintf("True AllTargetsReady %d/%d", demo.VSphereTargets, demo.VSphereTargets)}
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
		demo.GCPProvider: allReady[demo.GCPProvider], demo.KVMProvider: kvmDown, demo.VSphereProvider: allReady[demo.VSphereProvider]})
	stack.WaitForQuery(t, fmt.Sprintf(`proxy_operator_provider_target_reason{provider=%q,target=%q,reason="TCPUnreachable"} == 1`, demo.KVMProvider, down.Name),
		func(s []promstack.Sample) bool { return len(s) == 2 }, 60*time.Second)
	downSince := time.Now()
	// Exactly one alert reaches Alertmanager's receiver, not one per replica, naming the provider
	// and the target, with the reason in its description.
	isTargetDown := func(a promstack.NotifiedAlert) bool {
		return a.Labels["alertname"] == "ProviderHealthTargetDown" && a.Labels["provider"] == demo.KVMProvider && a.Labels["target"] == down.Name
	}
	firing := stack.WaitForNotification(t, func(n promstack.Notification) bool {
		for _, a := range n.Alerts {
			if isTargetDown(a) && a.Status == "firing" {
				return true
			}
		}
		return false
	}, 2*time.Minute)
	var alerts []promstack.NotifiedAlert
	for _, a := range firing.Alerts {
		if a.Labels["alertname"] == "ProviderHealthTargetDown" {
			alerts = append(alerts, a)
		}
	}
	if len(alerts) != 1 || !isTargetDown(alerts[0]) {
		t.Errorf("the notification holds %d ProviderHealthTargetDown alerts, want exactly one for %s/%s: %+v", len(alerts), demo.KVMProvider, down.Name, alerts)
	}
	for _, a := range alerts {
		if !strings.Contains(a.Annotations["description"], "TCPUnreachable") {
			t.Errorf("the alert's description does not give the reason TCPUnreachable: %q", a.Annotations["description"])
		}
		if want := []string{"alertname", "provider", "severity", "target"}; !sameKeys(a.Labels, want) {
			t.Errorf("the alert's labels are %v, want only %v", a.Labels, want)
		}
	}
	held, err := stack.Alerts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range held {
		if a.Name() == "ProviderHealthTargetDown" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("Alertmanager holds %d ProviderHealthTargetDown alerts, want 1 (two replicas check the same host)", n)
	}

	// The outage lasts more than a minute in Prometheus, as a real one would: the dashboard's
	// "since" column compares verdicts one minute apart at one-minute steps, so a shorter
	// outage between two steps may not show there at all.
	time.Sleep(time.Until(downSince.Add(70 * time.Second)))
	down.StartSSHD()
	waitPH("the host's sshd restarted", allReady)
	stack.WaitForNotification(t, func(n promstack.Notification) bool {
		for _, a := range n.Alerts {
			if isTargetDown(a) && a.Status == "resolved" {
				return true
			}
		}
		return false
	}, 2*time.Minute)

	// Every query of the dashboard, its variables substituted, returns data (now that a target
	// has changed state, the "since" column has something to show too), but the Sharding row's:
	// these replicas are not sharded.
	checkDashboardQueries(t, stack, false)

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
	testutil.Eventually(t, 2*failoverBound, "the other replica to take over", func() bool { return follower.leader(t) })
	took := time.Since(killed)
	t.Logf("the other replica took over %s after the leader was killed", took.Round(100*time.Millisecond))
	if took > failoverBound {
		t.Errorf("the other replica took over %s after the leader was killed, want at most %s (docs/crd.md)", took.Round(100*time.Millisecond), failoverBound)
	}
	// It writes: a new fault reaches the object.
	env.Fleet.Hosts[0].StopLibvirtd()
	testutil.Eventually(t, 60*time.Second, "the new leader to write the new fault", func() bool {
		return strings.HasPrefix(ph()[demo.KVMProvider], "False Libvirt")
	})
}

func sameKeys(m map[string]string, keys []string) bool {
	if len(m) != len(keys) {
		return false
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// checkDashboardQueries runs every query of the mixin's dashboards against Prometheus with the
// dashboard's variables substituted as Grafana would with "All" selected, and fails the test for
// each that returns nothing. Unless sharded, the queries of the shard's series
// (proxy_operator_shard_*, exported only with --shard.enabled) are left out: their panels are
// empty on an unsharded deployment, as docs/mixin.md says.
func checkDashboardQueries(t *testing.T, stack *promstack.Stack, sharded bool) {
	t.Helper()
	files, err := filepath.Glob(repoFile("mixin", "dashboards_out", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in mixin/dashboards_out (%v)", err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	// What Grafana substitutes: each query variable's "All" value (its allValue, a regex), and
	// the built-in intervals.
	substitute := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "10m")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Title      string            `json:"title"`
			Panels     []json.RawMessage `json:"panels"`
			Templating struct {
				List []struct {
					Name     string `json:"name"`
					Type     string `json:"type"`
					AllValue string `json:"allValue"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var vars []string
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				all := v.AllValue
				if all == "" {
					all = ".*"
				}
				vars = append(vars, "${"+v.Name+"}", all, "$"+v.Name, all)
			}
		}
		vars = append(vars, "${datasource}", "", "$datasource", "")
		variables := strings.NewReplacer(vars...)
		var exprs []string
		var walk func([]json.RawMessage)
		walk = func(raw []json.RawMessage) {
			for _, r := range raw {
				var p panel
				if err := json.Unmarshal(r, &p); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				for _, tg := range p.Targets {
					if tg.Expr != "" && (sharded || !strings.Contains(tg.Expr, "proxy_operator_shard_")) {
						exprs = append(exprs, p.Title+"\x00"+tg.Expr)
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		if len(exprs) < 10 {
			t.Errorf("%s: only %d queries found", file, len(exprs))
		}
		// A query over a subquery with one-minute steps (the "since" column) sees a state
		// change only from the next minute boundary on: give every query up to 90s.
		deadline := time.Now().Add(90 * time.Second)
		for _, e := range exprs {
			title, expr, _ := strings.Cut(e, "\x00")
			q := variables.Replace(substitute.Replace(expr))
			for {
				res, err := stack.Query(t.Context(), q)
				if err != nil {
					t.Errorf("%s, panel %q: %s: %v", d.Title, title, q, err)
					break
				}
				if len(res) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s, panel %q: no data for %s", d.Title, title, q)
					break
				}
				time.Sleep(time.Second)
			}
		}
	}
}
