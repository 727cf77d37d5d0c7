package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestHostFilesOnRealHosts: a kvm provider takes its hosts from a file in Prometheus's file_sd
// format only, and the inventory edits the file while the exporter (the whole program, with the
// ProviderHealth writer) runs, never reloaded. A host added is checked within a round; one
// removed leaves /metrics, the API and the ProviderHealth object, and its connection closes; the
// hosts kept keep their connection (no new SSH login on them). A file that turns invalid keeps
// the last good hosts checked, and the problem is on /metrics, the status page and the API; the
// next good file, which puts a host in maintenance by its label, applies at once.
func TestHostFilesOnRealHosts(t *testing.T) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	fleet := kvmhost.Start(t, 3)
	kvm := fleet.KVMConfig()
	addr := func(i int) string { return kvm.Hosts[i].Address }
	dir := t.TempDir()
	inventory := filepath.Join(dir, "inventory")
	if err := os.Mkdir(inventory, 0o755); err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(inventory, "fra1.json")
	providers := filepath.Join(dir, "providers.yml")
	if err := os.WriteFile(providers, fmt.Appendf(nil, `providers:
  - name: inventory
    type: kvm
    labels: {site: fra1}
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      hostFiles: [inventory/*.json]
`, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool), 0o600); err != nil {
		t.Fatal(err)
	}
	// The inventory writes a new file and renames it over the old one.
	write := func(data string) {
		t.Helper()
		testutil.ReplaceFile(t, hostFile, data)
	}
	group := func(labels string, hosts ...int) string {
		var ts []string
		for _, i := range hosts {
			ts = append(ts, fmt.Sprintf("%q", addr(i)))
		}
		return fmt.Sprintf(`{"targets": [%s], "labels": {%s}}`, strings.Join(ts, ", "), labels)
	}
	write("[" + group(`"rack": "r1"`, 0, 1) + "]\n")

	x := startExporter(t, "--config.file="+providers, "--provider-check-interval=10s", "--provider-check-timeout=5s",
		"--crd.enabled", "--crd.kubeconfig="+env.Kubeconfig)
	metrics := func() string { _, m := x.get("/metrics"); return m }
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig)
	// object returns the ProviderHealth object's targets as name=reason, sorted.
	object := func() []string {
		u, err := dyn.Resource(phResource).Get(context.Background(), "inventory", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		targets, _, _ := unstructured.NestedSlice(u.Object, "status", "targets")
		var out []string
		for _, tg := range targets {
			tm := tg.(map[string]any)
			out = append(out, fmt.Sprintf("%s=%s", tm["name"], tm["reason"]))
		}
		slices.Sort(out)
		return out
	}
	want := func(entries ...string) []string { slices.Sort(entries); return entries }
	type apiStatus struct {
		Data struct {
			Providers []struct {
				Targets            []map[string]any `json:"targets"`
				MaintenanceTargets []map[string]any `json:"maintenanceTargets"`
			} `json:"providers"`
			HostFileProblems []map[string]any `json:"hostFileProblems"`
		} `json:"data"`
	}
	status := func() apiStatus {
		t.Helper()
		code, body := x.get("/api/v1/status?provider=inventory")
		var out apiStatus
		if err := json.Unmarshal([]byte(body), &out); err != nil || code != http.StatusOK {
			t.Fatalf("GET /api/v1/status: %d %v", code, err)
		}
		return out
	}
	apiTargets := func(s apiStatus) []string {
		var out []string
		for _, p := range s.Data.Providers {
			for _, tg := range append(p.Targets, p.MaintenanceTargets...) {
				out = append(out, tg["name"].(string))
			}
		}
		slices.Sort(out)
		return out
	}
	fileSeries := func(m, name string) string {
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "proxy_operator_host_file_"+name+"{") && strings.Contains(l, `file="`+hostFile+`"`) {
				return l
			}
		}
		return ""
	}

	var m string
	testutil.Eventually(t, 40*time.Second, "both hosts of the file Ready, in the object too", func() bool {
		m = metrics()
		return testutil.TargetReason(m, addr(0)) == "Ready" && testutil.TargetReason(m, addr(1)) == "Ready" &&
			slices.Equal(object(), want(addr(0)+"=Ready", addr(1)+"=Ready"))
	})
	if info := testutil.TargetSeries(m, "proxy_operator_provider_target_info", addr(0)); !strings.Contains(info, `rack="r1"`) || !strings.Contains(info, `site="fra1"`) {
		t.Errorf("target_info of a file's host: %q, want its group's rack and its provider's site", info)
	}
	if ok, n := fileSeries(m, "last_read_successful"), fileSeries(m, "targets"); !strings.HasSuffix(ok, " 1") || !strings.HasSuffix(n, " 2") {
		t.Errorf("host file series %q, %q; want 1 and 2", ok, n)
	}
	logins := []int{fleet.Hosts[0].Logins(), fleet.Hosts[1].Logins()}

	// A host added: checked within a round, no redial of the others.
	write("[" + group(`"rack": "r1"`, 0, 1) + ", " + group(`"rack": "r2"`, 2) + "]\n")
	testutil.Eventually(t, 30*time.Second, "the added host Ready, in the object too", func() bool {
		m = metrics()
		return testutil.TargetReason(m, addr(2)) == "Ready" && slices.Equal(object(), want(addr(0)+"=Ready", addr(1)+"=Ready", addr(2)+"=Ready"))
	})
	if got := []int{fleet.Hosts[0].Logins(), fleet.Hosts[1].Logins()}; !slices.Equal(got, logins) {
		t.Errorf("SSH logins on the hosts the file kept: %v, were %v (a change of the file redialled them)", got, logins)
	}

	// A host removed: gone from /metrics, the API and the object; its connection closes.
	write("[" + group(`"rack": "r1"`, 0) + ", " + group(`"rack": "r2"`, 2) + "]\n")
	testutil.Eventually(t, 30*time.Second, "the removed host gone from /metrics, the API and the object", func() bool {
		m = metrics()
		return testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(1)) == "" && testutil.TargetSeries(m, "proxy_operator_provider_target_info", addr(1)) == "" &&
			slices.Equal(apiTargets(status()), want(addr(0), addr(2))) && slices.Equal(object(), want(addr(0)+"=Ready", addr(2)+"=Ready"))
	})
	testutil.Eventually(t, 20*time.Second, "the removed host's SSH connection closed", func() bool { return fleet.Hosts[1].TCPConnections() == 0 })
	if got := fleet.Hosts[0].Logins(); got != logins[0] {
		t.Errorf("SSH logins on the kept host: %d, were %d", got, logins[0])
	}

	// The file cut half-way: the last good hosts stay checked; the problem shows everywhere.
	write("[" + group(`"rack": "r1"`, 0) + ",\n  {\"targets\": [\"" + addr(1))
	testutil.Eventually(t, 30*time.Second, "the host file read as failed", func() bool {
		return strings.HasSuffix(fileSeries(metrics(), "last_read_successful"), " 0")
	})
	m = metrics()
	checked := testutil.TargetSeries(m, "proxy_operator_provider_target_checks_total", addr(2))
	testutil.Eventually(t, 30*time.Second, "another round of the kept hosts", func() bool {
		m = metrics()
		return testutil.TargetSeries(m, "proxy_operator_provider_target_checks_total", addr(2)) != checked
	})
	if testutil.TargetReason(m, addr(0)) != "Ready" || testutil.TargetReason(m, addr(2)) != "Ready" || testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(1)) != "" {
		t.Errorf("with the file invalid: %s reads %q, %s %q, %s has target_up %q; want the last good hosts Ready and nothing else",
			addr(0), testutil.TargetReason(m, addr(0)), addr(2), testutil.TargetReason(m, addr(2)), addr(1), testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(1)))
	}
	if n := fileSeries(m, "targets"); !strings.HasSuffix(n, " 2") {
		t.Errorf("host_file_targets with the file invalid: %q, want the last good read's 2", n)
	}
	problems := status().Data.HostFileProblems
	if len(problems) != 1 || problems[0]["file"] != hostFile || problems[0]["hostsKept"] != 2.0 ||
		!strings.HasPrefix(problems[0]["error"].(string), hostFile+":2:") || !strings.Contains(problems[0]["error"].(string), "invalid JSON") {
		t.Errorf("the API's hostFileProblems: %v", problems)
	}
	if _, page := x.get("/"); !strings.Contains(page, `<table id="host-file-problems">`) || !strings.Contains(page, hostFile+":2:") {
		t.Errorf("the status page does not show the host file's problem:\n%s", page)
	}

	// Fixed, with a host put in maintenance by the inventory: applied at the next round.
	write("[" + group(`"rack": "r1", "maintenance": "true"`, 0) + ", " + group(`"rack": "r2"`, 2) + "]\n")
	testutil.Eventually(t, 30*time.Second, "the maintained host in Maintenance, in the object too", func() bool {
		m = metrics()
		return testutil.TargetReason(m, addr(0)) == "Maintenance" && testutil.TargetReason(m, addr(2)) == "Ready" &&
			slices.Equal(object(), want(addr(0)+"=Maintenance", addr(2)+"=Ready"))
	})
	if ok := fileSeries(m, "last_read_successful"); !strings.HasSuffix(ok, " 1") {
		t.Errorf("host_file_last_read_successful after the fix: %q", ok)
	}
	if p := status().Data.HostFileProblems; len(p) != 0 {
		t.Errorf("hostFileProblems after the fix: %v", p)
	}
	if got := fleet.Hosts[0].Logins(); got != logins[0] {
		t.Errorf("SSH logins on the host put in maintenance: %d, were %d (a label change redialled it)", got, logins[0])
	}

	// The file deleted: its hosts and its series leave.
	if err := os.Remove(hostFile); err != nil {
		t.Fatal(err)
	}
	var left string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last seen: %s", left)
		}
	})
	testutil.Eventually(t, 30*time.Second, "the deleted file's hosts gone", func() bool {
		m = metrics()
		left = fmt.Sprintf("target_up %q %q, file series %q, object %v", testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(0)),
			testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(2)), fileSeries(m, "last_read_successful"), object())
		return testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(0)) == "" && testutil.TargetSeries(m, "proxy_operator_provider_target_up", addr(2)) == "" &&
			fileSeries(m, "last_read_successful") == "" && len(object()) == 0
	})
	if !strings.Contains(x.logs.String(), "host files changed") {
		t.Errorf("no log line of the host file changes:\n%s", x.logs.String())
	}
}
