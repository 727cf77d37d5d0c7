package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestOperatorMaintenanceOnRealHosts: the exporter checks two real KVM hosts under
// failureThreshold 3. The operator labels hv0 maintenance=true and reloads, then stops its sshd
// (the host is being worked on): from the next round hv0 reads Maintenance, not up and not
// down, on /metrics, the status page and the API, with what its checks found in the message;
// its failed checks count as none. hv1 is untouched. The label removed and the exporter
// reloaded, hv0's real verdict (TCPUnreachable, sshd stopped) is published at the next round,
// without waiting out the threshold; sshd back, it reads Ready.
func TestOperatorMaintenanceOnRealHosts(t *testing.T) {
	fleet := kvmhost.Start(t, 2)
	kvm := fleet.KVMConfig()
	hv0, hv1 := kvm.Hosts[0].Name, kvm.Hosts[1].Name
	path := filepath.Join(t.TempDir(), "providers.yml")
	write := func(hv0Labels string) {
		t.Helper()
		file := fmt.Sprintf(`providers:
  - name: hypervisors
    type: kvm
    failureThreshold: 3
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      hosts:
        - {address: %q, name: %s, labels: %s}
        - {address: %q, name: %s}
`, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool,
			kvm.Hosts[0].Address, hv0, hv0Labels, kvm.Hosts[1].Address, hv1)
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("{rack: r1}")
	x := startExporter(t, "--config.file="+path, "--provider-check-interval=10s", "--provider-check-timeout=5s", "--web.enable-lifecycle")
	reload := func() {
		t.Helper()
		if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
			t.Fatalf("POST /-/reload: %d %q", code, body)
		}
	}
	// status is target's entry in GET /api/v1/status (its targets, or those in maintenance).
	status := func(target string) map[string]any {
		t.Helper()
		code, body := x.get("/api/v1/status?provider=hypervisors")
		var out struct {
			Data struct {
				Providers []struct {
					Targets            []map[string]any `json:"targets"`
					MaintenanceTargets []map[string]any `json:"maintenanceTargets"`
				} `json:"providers"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || code != http.StatusOK {
			t.Fatalf("GET /api/v1/status: %d %v", code, err)
		}
		for _, p := range out.Data.Providers {
			for _, tg := range append(p.Targets, p.MaintenanceTargets...) {
				if tg["name"] == target {
					return tg
				}
			}
		}
		t.Fatalf("GET /api/v1/status lists no %s", target)
		return nil
	}
	metrics := func() string { _, m := x.get("/metrics"); return m }
	testutil.Eventually(t, 30*time.Second, "both hosts Ready", func() bool {
		m := metrics()
		return testutil.TargetReason(m, hv0) == "Ready" && testutil.TargetReason(m, hv1) == "Ready"
	})

	write("{rack: r1, maintenance: \"true\"}")
	reload()
	fleet.Hosts[0].StopSSHD()
	fleet.Hosts[0].KillSSHConnections()
	var m string
	testutil.Eventually(t, 25*time.Second, "hv0 in Maintenance", func() bool { m = metrics(); return testutil.TargetReason(m, hv0) == "Maintenance" })
	// Rounds go on: its failed checks still count as none, and it stays in Maintenance.
	before := testutil.TargetSeries(m, "proxy_operator_provider_target_checks_total", hv0)
	testutil.Eventually(t, 25*time.Second, "another round", func() bool {
		m = metrics()
		return testutil.TargetSeries(m, "proxy_operator_provider_target_checks_total", hv0) != before && testutil.TargetReason(m, hv0) == "Maintenance" &&
			strings.Contains(status(hv0)["message"].(string), "the last check: TCPUnreachable")
	})
	if up := testutil.TargetSeries(m, "proxy_operator_provider_target_up", hv0); !strings.HasSuffix(up, " 0") {
		t.Errorf("hv0 in maintenance: %q, want target_up 0", up)
	}
	if failed := testutil.TargetSeries(m, "proxy_operator_provider_target_checks_failed_total", hv0); !strings.HasSuffix(failed, " 0") {
		t.Errorf("hv0's checks in maintenance counted as failed: %q", failed)
	}
	if testutil.TargetReason(m, hv1) != "Ready" {
		t.Errorf("hv1 reads %s while its neighbour is in maintenance, want Ready", testutil.TargetReason(m, hv1))
	}
	st := status(hv0)
	if st["reason"] != "Maintenance" || !strings.HasPrefix(st["message"].(string), "in maintenance (label maintenance=true)") ||
		st["labels"].(map[string]any)["maintenance"] != "true" {
		t.Errorf("the API's hv0: %v, want Maintenance, the label in its message and labels", st)
	}
	if _, page := x.get("/"); !strings.Contains(page, "1 target in maintenance, counted neither ready nor down: "+hv0) {
		t.Errorf("the status page does not list hv0 apart as in maintenance:\n%s", page)
	}

	// Out of maintenance: its real verdict at the next round, failureThreshold 3 or not.
	write("{rack: r1}")
	reload()
	testutil.Eventually(t, 25*time.Second, "hv0 down at the next round after the maintenance", func() bool {
		m = metrics()
		return testutil.TargetReason(m, hv0) == "TCPUnreachable"
	})
	if up := testutil.TargetSeries(m, "proxy_operator_provider_target_up", hv0); !strings.HasSuffix(up, " 0") {
		t.Errorf("hv0 after the maintenance: %q, want target_up 0", up)
	}
	fleet.Hosts[0].StartSSHD()
	testutil.Eventually(t, 25*time.Second, "hv0 Ready once sshd is back", func() bool { return testutil.TargetReason(metrics(), hv0) == "Ready" })
}
