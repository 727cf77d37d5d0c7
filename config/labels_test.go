package config

import (
	"strings"
	"testing"
	"time"
)

func TestDNSLabel(t *testing.T) {
	for s, ok := range map[string]bool{
		"a": true, "cluster-main": true, "123": true, "a1-b2": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false,
	} {
		if got := dnsLabel(s) == ""; got != ok {
			t.Errorf("dnsLabel(%q) valid=%v, want %v", s, got, ok)
		}
	}
}

// TestInMaintenance: true is maintenance until the label goes; false or no label is none; an
// end time is maintenance until it passes (the instant itself is past); a value the loader
// refuses (MaintenanceValueProblem) is none here too.
func TestInMaintenance(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]string{
		"true":                      "label maintenance=true",
		"false":                     "",
		"2026-12-03T12:00:01Z":      "label maintenance until 2026-12-03T12:00:01Z",
		"2026-12-03T13:30:00+01:00": "label maintenance until 2026-12-03T12:30:00Z",
		"2026-12-03T12:00:00Z":      "",
		"2026-12-02T00:00:00Z":      "",
		"soon":                      "",
	} {
		in, how := InMaintenance(map[string]string{"maintenance": v, "rack": "r1"}, now)
		if in != (want != "") || how != want {
			t.Errorf("maintenance=%s: %v %q, want %q", v, in, how, want)
		}
		if valid := MaintenanceValueProblem(v) == ""; valid != (v != "soon") {
			t.Errorf("maintenance=%s: valid %v", v, valid)
		}
	}
	if in, _ := InMaintenance(map[string]string{"rack": "r1"}, now); in {
		t.Error("no maintenance label: in maintenance")
	}
}
