package exporter

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/status/")

// richSnapshot holds a little of everything the status page and API show: labels, a verdict a
// threshold holds with its transitions (markup among them), recent-check strips, targets in
// maintenance, unchecked targets, a provider not checked yet, and several reasons down.
func richSnapshot() (*checks.Snapshot, time.Time) {
	s, now := labelledFleet()
	strip, _ := stripFleet(12)
	s.Providers = append(s.Providers, strip.Providers[0])
	h := historyTarget(now)
	maint := func(name string) checks.TargetState {
		return checks.TargetState{TargetResult: checks.TargetResult{Target: name, Reason: checks.ReasonMaintenance,
			Message: "in maintenance mode", CheckedAt: now.Add(-4 * time.Second), Duration: 1500*time.Microsecond + 7}, Since: now.Add(-2 * time.Hour)}
	}
	// Down for less long than hv-m1 is in maintenance: the page's since and the API's differ.
	down := checks.TargetState{TargetResult: checks.TargetResult{Target: "hv-d", Reason: kvm.ReasonLibvirtError, Message: "rpc: <i>x</i>",
		CheckedAt: now.Add(-3 * time.Second), Duration: 1234567891 * time.Nanosecond}, Since: now.Add(-30 * time.Minute)}
	s.Providers = append(s.Providers,
		checks.ProviderState{Name: "kvm-hist", Type: kvm.Type, Targets: []checks.TargetState{h, maint("hv-m1"), down},
			Unchecked: []checks.UncheckedTarget{{Target: "hv-new", Listed: now.Add(-90 * time.Second), Message: "not started: the round's deadline came"}}},
		checks.ProviderState{Name: "kvm-empty", Type: kvm.Type,
			Unchecked: []checks.UncheckedTarget{{Target: "hv-x", Listed: now.Add(-time.Minute)}}},
	)
	return s, now
}

// goldenExporter is an exporter with a writer report of every kind of problem and a host file
// that does not read well.
func goldenExporter(now time.Time) *Exporter {
	e := landingExporter()
	e.CRDReport = func() crdwriter.Report {
		return crdwriter.Report{Writing: true, SyncedRound: 41, Problems: []crdwriter.ObjectProblem{
			{Provider: "gcp-prod", Problem: crdwriter.ProblemFailing, Err: `forbidden: "denied" <b>`, Since: now.Add(-10 * time.Minute), Attempts: 3, RetryAt: now.Add(time.Minute)},
			{Provider: "kvm-east", Problem: crdwriter.ProblemRejected, Err: "spec.x: Invalid value", Since: now.Add(-time.Hour)},
			{Provider: "kvm-west", Problem: crdwriter.ProblemNameClash, Since: now.Add(-time.Minute)},
		}}
	}
	e.inventory = newInventory(slog.New(slog.DiscardHandler), config.DefaultLimits)
	e.inventory.files[fileKey{"kvm-east", "/etc/inventory/east.json"}] = &targetFile{good: true, err: errors.New("permission denied"),
		errSince: now.Add(-5 * time.Minute), groups: []config.TargetGroup{{Targets: []string{"hv-a", "hv-b"}}}}
	return e
}

// TestStatusGolden pins /api/v1/status and the status page byte for byte, for a range of
// snapshots and queries: a change of either shows here. Run with -update after a deliberate
// change, and read the diff.
func TestStatusGolden(t *testing.T) {
	rich, now := richSnapshot()
	fleet := newFleet()
	checksOff := landingExporter()
	checksOff.interval, checksOff.timeout = 0, 0
	cases := []struct {
		name  string
		e     *Exporter
		s     *checks.Snapshot
		now   time.Time
		query string
	}{
		{"rich", goldenExporter(now), rich, now, ""},
		{"rich-down", goldenExporter(now), rich, now, "state=down"},
		{"rich-up", goldenExporter(now), rich, now, "state=up"},
		{"rich-reason", goldenExporter(now), rich, now, "reason=TCPUnreachable"},
		{"rich-maintenance", goldenExporter(now), rich, now, "reason=Maintenance"},
		{"rich-label", goldenExporter(now), rich, now, "label=dc%3Deast&label=rack%3Dr1"},
		{"rich-provider", goldenExporter(now), rich, now, "provider=kvm-hist"},
		{"rich-no-provider", goldenExporter(now), rich, now, "provider=nope"},
		{"rich-no-reason", goldenExporter(now), rich, now, "reason=PoolDegraded&label=dc%3Dwest"},
		{"rich-bad-state", goldenExporter(now), rich, now, "state=sideways"},
		{"rich-bad-label", goldenExporter(now), rich, now, "label=1x%3Dy"},
		{"rich-bad-page", goldenExporter(now), rich, now, "page=0"},
		{"fleet-down", landingExporter(), fleet.snap, fleet.now, "state=down"},
		{"fleet-page5", landingExporter(), fleet.snap, fleet.now, "page=5"},
		{"fleet-east-page3", landingExporter(), fleet.snap, fleet.now, "provider=kvm-east&state=up&page=3"},
		{"checks-off", checksOff, &checks.Snapshot{Providers: []checks.ProviderState{{Name: "a", Type: kvm.Type}, {Name: "b", Type: "gcp"}}}, now, ""},
		{"no-providers", landingExporter(), &checks.Snapshot{Round: 1, RoundStarted: now.Add(-time.Second)}, now, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := httptest.NewRecorder()
			tc.e.renderStatusAPI(api, httptest.NewRequest("GET", "/api/v1/status?"+tc.query, nil), tc.s, tc.now)
			page := httptest.NewRecorder()
			tc.e.renderLanding(page, httptest.NewRequest("GET", "/?"+tc.query, nil), tc.s, tc.now)
			compareGolden(t, tc.name+".json", fmt.Appendf(nil, "%d %s\n%s", api.Code, api.Header().Get("Content-Type"), api.Body.Bytes()))
			compareGolden(t, tc.name+".html", fmt.Appendf(nil, "%d %s\n%s", page.Code, page.Header().Get("Content-Type"), page.Body.Bytes()))
		})
	}
}

// compareGolden compares got with testdata/status/name, or writes it there under -update.
func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "status", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./exporter -run TestStatusGolden -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		from := max(0, i-200)
		t.Fatalf("%s differs from %s at byte %d (line %d):\ngot:  %q\nwant: %q", name, path, i, bytes.Count(want[:i], []byte("\n"))+1,
			got[from:min(len(got), i+200)], want[from:min(len(want), i+200)])
	}
}
