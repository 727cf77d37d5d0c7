package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestVSphereEndToEnd runs the exporter with a vsphere provider against the vCenter simulator:
// the vCenter's target and each ESXi host of the datacenter read up on /metrics and the status
// page, the datastore's gauges are exported, probes of the vCenter and of a host reuse the
// round's session (the simulator counts one), and no answer holds the password.
func TestVSphereEndToEnd(t *testing.T) {
	sim := vcsim.Start(t, vcsim.Options{})
	_, srv := startProbeExporter(t, fmt.Sprintf(`providers:
  - name: vcenter
    type: vsphere
    vsphere:
      url: %s
      usernameFile: %s
      passwordFile: %s
      caFile: %s
      datacenter: DC0
`, sim.URL(), sim.UsernameFile(), sim.PasswordFile(), sim.CAFile()), time.Minute, 15*time.Second)
	client := &http.Client{Timeout: 30 * time.Second}
	secrets := []string{sim.Password()}

	_, metrics := testutil.Fetch(t, client, srv.URL+"/metrics")
	up := fmt.Sprintf(`proxy_operator_provider_target_up{provider="vcenter",target=%q} 1`, sim.Host())
	if !strings.Contains(metrics, up) {
		t.Errorf("/metrics lacks %s:\n%s", up, testutil.VerdictLines(metrics))
	}
	hosts := []string{"DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2", "DC0_H0"}
	for _, h := range hosts {
		if up := fmt.Sprintf(`proxy_operator_provider_target_up{provider="vcenter",target=%q} 1`, h); !strings.Contains(metrics, up) {
			t.Errorf("/metrics lacks %s:\n%s", up, testutil.VerdictLines(metrics))
		}
	}
	for _, g := range []string{"accessible", "capacity_bytes", "free_bytes"} {
		series := fmt.Sprintf(`proxy_operator_vsphere_datastore_%s{datacenter="DC0",datastore="LocalDS_0",provider="vcenter",target=%q}`, g, sim.Host())
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	noSecrets(t, "/metrics", metrics, secrets)
	for _, target := range []string{sim.Host(), "DC0_C0_H1"} {
		code, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=vcenter&target="+target+"&debug=true")
		if code != http.StatusOK || !strings.Contains(body, "verdict: Ready (up)") || !strings.Contains(body, "probe_success 1") {
			t.Errorf("probe of %s: %d\n%s", target, code, body)
		}
		noSecrets(t, "the probe's trace", body, secrets)
	}
	_, page := testutil.Fetch(t, client, srv.URL+"/")
	for _, target := range append([]string{sim.Host()}, hosts...) {
		if !strings.Contains(page, target) {
			t.Errorf("the status page does not list the target %s", target)
		}
	}
	noSecrets(t, "the status page", page, secrets)
	if got := sim.SessionsOf(sim.Username()); len(got) != 1 || got[0].CallCount != 4 {
		t.Errorf("sessions %+v, want one with 4 calls (the login, the round's retrieval, one for each probe)", got)
	}
}

// TestVSphereHostMaintenanceEndToEnd: a host put in maintenance mode reads Maintenance at the
// exporter's next round (target_up 0, reason Maintenance), listed apart on the status page and
// not counted down in its summary; the other hosts stay up, and every round costs the session
// one call.
func TestVSphereHostMaintenanceEndToEnd(t *testing.T) {
	sim := vcsim.Start(t, vcsim.Options{})
	const interval = time.Second
	e, srv := startProbeExporter(t, fmt.Sprintf(`providers:
  - name: vcenter
    type: vsphere
    vsphere:
      url: %s
      usernameFile: %s
      passwordFile: %s
      caFile: %s
`, sim.URL(), sim.UsernameFile(), sim.PasswordFile(), sim.CAFile()), interval, interval)
	client := &http.Client{Timeout: 30 * time.Second}
	sim.HostTask("DC0_C0_H1", vcsim.EnterMaintenance)
	entered := e.Runner().Current().Round
	var metrics string
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, metrics = testutil.Fetch(t, client, srv.URL+"/metrics")
		if strings.Contains(metrics, `proxy_operator_provider_target_reason{provider="vcenter",reason="Maintenance",target="DC0_C0_H1"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DC0_C0_H1 does not read Maintenance within 30s:\n%s", testutil.VerdictLines(metrics))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := e.Runner().Current().Round; r > entered+2 {
		t.Errorf("Maintenance read at round %d, %d rounds after the change (round %d): want the next round", r, r-entered, entered)
	}
	for target, up := range map[string]int{sim.Host(): 1, "DC0_H0": 1, "DC0_C0_H0": 1, "DC0_C0_H1": 0, "DC0_C0_H2": 1} {
		if line := fmt.Sprintf(`proxy_operator_provider_target_up{provider="vcenter",target=%q} %d`, target, up); !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s:\n%s", line, testutil.VerdictLines(metrics))
		}
	}
	_, page := testutil.Fetch(t, client, srv.URL+"/")
	for _, want := range []string{"4 of 5 targets ready; 1 target in maintenance.", "1 target in maintenance, counted neither ready nor down: DC0_C0_H1"} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q", want)
		}
	}
	// The calls the session counted: the login, then one a round (a round may be under way).
	rounds := e.Runner().Current().Round
	if got := sim.SessionsOf(sim.Username()); len(got) != 1 || got[0].CallCount < int64(1+rounds) || got[0].CallCount > int64(2+rounds) {
		t.Errorf("sessions %+v after %d rounds, want one with the login and one call a round", got, rounds)
	}
}
