package e2e

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestReloadKeepsUnchangedHostsLinks: a reload that changes a kvm provider's hosts keeps the
// links of the hosts in both lists (no new SSH login on them, counted by their sshd), closes the
// removed host's link, and dials only the added host. A reload that fails leaves the running
// checker's links alone.
func TestReloadKeepsUnchangedHostsLinks(t *testing.T) {
	fleet := kvmhost.Start(t, 3)
	h0, h1, h2 := fleet.Hosts[0], fleet.Hosts[1], fleet.Hosts[2]
	path := kvmProviders(t, fleet, map[string][]int{"kvm-lab": {0, 1}})
	x := startExporter(t, "--config.file="+path, "--provider-check-interval=10s", "--web.enable-lifecycle")
	metrics := func() string { _, m := x.get("/metrics"); return m }
	rounds := func() float64 {
		v, _ := testutil.Metric(t, metrics(), "proxy_operator_provider_check_rounds_total")
		return v
	}
	ready := func(m string, hosts ...*kvmhost.Host) bool {
		for _, h := range hosts {
			if testutil.TargetReason(m, h.Name) != "Ready" {
				return false
			}
		}
		return true
	}
	// reload replaces the providers file with next (renamed over it) and reloads.
	reload := func(next string, wantCode int) {
		t.Helper()
		if err := os.Rename(next, path); err != nil {
			t.Fatal(err)
		}
		if code, body := x.do(http.MethodPost, "/-/reload"); code != wantCode {
			t.Fatalf("POST /-/reload: %d %s, want %d", code, body, wantCode)
		}
	}
	testutil.Eventually(t, 30*time.Second, "kvm-0 and kvm-1 Ready", func() bool { return ready(metrics(), h0, h1) })
	if h0.Logins() != 1 || h1.Logins() != 1 {
		t.Fatalf("logins %d, %d after the first round, want 1 each", h0.Logins(), h1.Logins())
	}

	// A reload that fails (another provider is invalid) changes nothing.
	bad := kvmProviders(t, fleet, map[string][]int{"kvm-lab": {1, 2}})
	b, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, append(b, "  - name: broken\n    type: vmware\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	reload(bad, http.StatusInternalServerError)
	before := rounds()
	testutil.Eventually(t, 30*time.Second, "a round after the failed reload", func() bool { return rounds() > before })
	if m := metrics(); !ready(m, h0, h1) || testutil.TargetSeries(m, "proxy_operator_provider_target_up", h2.Name) != "" {
		t.Errorf("after a failed reload the verdicts changed:\n%s", testutil.VerdictLines(m))
	}
	if h0.Logins() != 1 || h1.Logins() != 1 || h0.TCPConnections() != 1 || h1.TCPConnections() != 1 {
		t.Fatalf("after a failed reload: logins %d, %d, connections %d, %d; want 1 each (links untouched)",
			h0.Logins(), h1.Logins(), h0.TCPConnections(), h1.TCPConnections())
	}

	// kvm-0 removed, kvm-2 added, kvm-1 kept.
	reload(kvmProviders(t, fleet, map[string][]int{"kvm-lab": {1, 2}}), http.StatusOK)
	if r := x.logs.Await(t, 10*time.Second, "providers file reloaded"); r["changed"] != float64(1) {
		t.Fatalf("the reload's log record %v, want the provider changed", r)
	}
	testutil.Eventually(t, 30*time.Second, "kvm-1 and kvm-2 Ready, kvm-0 gone", func() bool {
		m := metrics()
		return ready(m, h1, h2) && testutil.TargetSeries(m, "proxy_operator_provider_target_up", h0.Name) == ""
	})
	if n := h1.Logins(); n != 1 {
		t.Errorf("kept host %s: %d logins, want 1: 0 new handshakes after the reload", h1.Name, n)
	}
	if n := h2.Logins(); n != 1 {
		t.Errorf("added host %s: %d logins, want 1", h2.Name, n)
	}
	testutil.Eventually(t, 10*time.Second, "the removed host's link to close", func() bool { return h0.TCPConnections() == 0 })
	if n := h1.TCPConnections(); n != 1 {
		t.Errorf("kept host %s: %d TCP connections, want its 1 link", h1.Name, n)
	}
}
