package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/vcsim"
)

// TestVSphereEndToEnd runs the exporter with a vsphere provider against the vCenter simulator:
// the target reads up on /metrics and the status page, a probe reuses the round's session (the
// simulator counts one), and no answer holds the password.
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

	_, metrics := fetch(t, client, srv.URL+"/metrics")
	up := fmt.Sprintf(`proxy_operator_provider_target_up{provider="vcenter",target=%q} 1`, sim.Host())
	if !strings.Contains(metrics, up) {
		t.Errorf("/metrics lacks %s:\n%s", up, verdictLines(metrics))
	}
	noSecrets(t, "/metrics", metrics, secrets)
	code, body := fetch(t, client, srv.URL+"/probe?provider=vcenter&target="+sim.Host()+"&debug=true")
	if code != http.StatusOK || !strings.Contains(body, "verdict: Ready (up)") || !strings.Contains(body, "probe_success 1") {
		t.Errorf("probe: %d\n%s", code, body)
	}
	noSecrets(t, "the probe's trace", body, secrets)
	_, page := fetch(t, client, srv.URL+"/")
	if !strings.Contains(page, sim.Host()) {
		t.Errorf("the status page does not list the target %s", sim.Host())
	}
	noSecrets(t, "the status page", page, secrets)
	if got := sim.SessionsOf(sim.Username()); len(got) != 1 || got[0].CallCount != 3 {
		t.Errorf("sessions %+v, want one with 3 calls (the login, the round's, the probe's)", got)
	}
}
