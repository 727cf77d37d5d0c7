package exporter

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// A target in maintenance is listed apart: neither among the ready targets nor among the down
// ones, in the provider's count of down targets, its worst reason or the summary's down count.
func TestLandingMaintenance(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ts := func(name string, r checks.Reason) checks.TargetState {
		return checks.TargetState{TargetResult: checks.TargetResult{Target: name, Up: r == checks.ReasonReady, Reason: r,
			Message: "msg-" + name, CheckedAt: now.Add(-10 * time.Second)}, Since: now.Add(-time.Hour)}
	}
	snap := &checks.Snapshot{Round: 3, RoundStarted: now.Add(-10 * time.Second), Providers: []checks.ProviderState{
		{Name: "vc-a", Type: "vsphere", Targets: []checks.TargetState{
			ts("vc-a.example.com", checks.ReasonReady), ts("esx-a1", checks.ReasonReady), ts("esx-a2", checks.ReasonMaintenance)}},
		{Name: "vc-b", Type: "vsphere", Targets: []checks.TargetState{
			ts("vc-b.example.com", checks.ReasonReady), ts("esx-b1", "HostDisconnected"), ts("esx-b2", checks.ReasonMaintenance)}},
	}}
	e := landingExporter()
	d := e.landingData(snap, landingFilter{}, now)
	if want := "2 providers, 3 of 6 targets ready; 1 target down in 1 provider; 2 targets in maintenance."; d.Summary != want {
		t.Errorf("summary %q, want %q", d.Summary, want)
	}
	if len(d.Providers) != 2 || d.Providers[0].Name != "vc-b" {
		t.Fatalf("providers %+v, want vc-b (a target down) first", d.Providers)
	}
	b, a := d.Providers[0], d.Providers[1]
	if b.DownTotal != 1 || len(b.Down) != 1 || b.Down[0].Target != "esx-b1" || b.WorstReason != "HostDisconnected" || b.Maintenance != 1 {
		t.Errorf("vc-b: %d down %+v, worst %s, %d in maintenance; want esx-b1 alone down, 1 in maintenance", b.DownTotal, b.Down, b.WorstReason, b.Maintenance)
	}
	if a.DownTotal != 0 || len(a.Down) != 0 || a.Ready != 2 || len(a.Up) != 2 || a.Maintenance != 1 ||
		a.MaintenanceNote != "1 target in maintenance, counted neither ready nor down: esx-a2 (since "+formatTime(now.Add(-time.Hour))+")." {
		t.Errorf("vc-a: %d down, %d/%d ready (%d rows), %d in maintenance, note %q", a.DownTotal, a.Ready, a.Total, len(a.Up), a.Maintenance, a.MaintenanceNote)
	}

	rec := httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/", nil), snap, now)
	page := rec.Body.String()
	section := page[strings.Index(page, `id="provider-vc-a"`):]
	section = section[:strings.Index(section, "</tbody>")]
	for _, want := range []string{`<span class="up">2/3 ready</span>`, "ready since", `<tr class="maintenance-targets">`, "esx-a2 (since"} {
		if !strings.Contains(section, want) {
			t.Errorf("vc-a's section lacks %q:\n%s", want, section)
		}
	}
	if strings.Contains(section, "msg-esx-a2") {
		t.Errorf("vc-a's section lists the target in maintenance as a row:\n%s", section)
	}

	// ?reason=Maintenance selects both providers (their targets in maintenance, listed apart),
	// not "no target reads Maintenance"; the API lists those targets in maintenanceTargets,
	// under no state filter only (they are neither down nor ready).
	d = e.landingData(snap, landingFilter{Reason: checks.ReasonMaintenance}, now)
	if len(d.Providers) != 2 {
		t.Errorf("reason=Maintenance: %d providers, want both", len(d.Providers))
	}
	for q, want := range map[string]int{"": 2, "reason=Maintenance": 2, "reason=HostDisconnected": 0, "state=down": 0, "state=up": 0} {
		_, out, _ := statusJSON(t, e, q, snap, now)
		n := 0
		for _, p := range out["data"].(map[string]any)["providers"].([]any) {
			pm := p.(map[string]any)
			for _, tg := range pm["maintenanceTargets"].([]any) {
				if tm := tg.(map[string]any); tm["reason"] != "Maintenance" || !strings.HasPrefix(tm["name"].(string), "esx-") {
					t.Errorf("?%s: maintenanceTargets holds %v", q, tm)
				}
				n++
			}
			if pm["maintenance"] != 1.0 {
				t.Errorf("?%s: %s counts %v in maintenance, want 1", q, pm["name"], pm["maintenance"])
			}
		}
		if n != want {
			t.Errorf("?%s: %d targets in maintenanceTargets, want %d", q, n, want)
		}
	}
}
