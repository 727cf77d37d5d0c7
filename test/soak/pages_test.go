package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// TestPages judges pages by hand against the expectations of a few spans: a long outage of one
// host of two must page TargetDown in time and resolve in time; a short one may page or not; a
// whole single-target provider's outage must page ProviderDown only; a page nothing calls for,
// a late page and a late resolution are each counted.
func TestPages(t *testing.T) {
	tm := Timing{
		Interval: 2 * time.Second, Timeout: 1500 * time.Millisecond, Scrape: 500 * time.Millisecond, Eval: 500 * time.Millisecond,
		GroupWait: 250 * time.Millisecond, GroupInterval: 2500 * time.Millisecond,
		For:            map[string]time.Duration{alertTargetDown: 2500 * time.Millisecond, alertProviderDown: 2500 * time.Millisecond},
		Severity:       map[string]string{alertTargetDown: "warning", alertProviderDown: "critical"},
		FlappingWindow: 15 * time.Second, FlappingThreshold: 4,
	}
	if tm.Lag() != 4500*time.Millisecond || tm.Notify() != 4500*time.Millisecond {
		t.Fatalf("lag %s, notify %s", tm.Lag(), tm.Notify())
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sp := func(fault string, from, to float64) span {
		return span{Fault: fault, OuterFrom: at(from), InnerFrom: at(from + 0.1), InnerTo: at(to), OuterTo: at(to + 0.1)}
	}
	targets := map[string][]string{"kvm": {"hv1", "hv2"}, "gcp": {"proj"}}
	spans := map[TargetKey][]span{
		{"kvm", "hv1"}:  {sp("sshd-stopped", 10, 22), sp("pool-destroyed", 40, 45)},
		{"gcp", "proj"}: {sp("gce-5xx", 10, 22)},
		{"kvm", "hv2"}:  {sp("sshd-stopped", 50, 55), sp("libvirtd-sigstop", 58, 75)},
	}
	exp := expectations(tm, targets, spans)
	var must []string
	for _, e := range exp {
		if e.Must {
			must = append(must, e.String())
		}
	}
	// 12 s down is more than for: + lag + an evaluation (7.5 s); 5 s is not.
	if len(must) != 3 || !strings.Contains(must[0], "ProviderDown gcp (critical)") || !strings.Contains(must[1], "TargetDown kvm/hv1 (warning) for sshd-stopped") ||
		!strings.Contains(must[2], "TargetDown kvm/hv2 (warning) for libvirtd-sigstop") {
		t.Fatalf("must pages: %q", must)
	}
	page := func(alert, provider, target, sev string, fired, resolved float64) *Page {
		p := &Page{Alert: alert, Provider: provider, Target: target, Severity: sev, Fired: at(fired)}
		if resolved > 0 {
			p.Resolved = at(resolved)
		}
		return p
	}
	r := judgePages(tm, exp, []*Page{
		page(alertTargetDown, "kvm", "hv1", "warning", 15, 24),  // in time
		page(alertProviderDown, "gcp", "", "critical", 25, 0),   // late (due by 17.6) and never resolved
		page(alertTargetDown, "gcp", "proj", "warning", 20, 23), // muted by ProviderDown: extra
		page(alertTargetDown, "kvm", "hv1", "warning", 44, 47),  // the short outage: allowed
		page(alertTargetDown, "kvm", "hv2", "warning", 30, 31),  // nothing held on hv2: extra
		page(alertTargetDown, "kvm", "hv1", "critical", 16, 24), // wrong severity: extra
		// Within the first hv2 outage's window, but for: after the second began: the second's.
		page(alertTargetDown, "kvm", "hv2", "warning", 62, 77),
	})
	if len(r.Missing) != 0 || len(r.Late) != 1 || r.Late[0].Alert != alertProviderDown || len(r.LateResolved) != 1 ||
		len(r.Extra) != 3 || r.Allowed != 1 || r.Must != 3 {
		t.Errorf("missing %v, late %v, late resolutions %v, extra %v, allowed %d, must %d", r.Missing, r.Late, r.LateResolved, r.Extra, r.Allowed, r.Must)
	}
	if r := judgePages(tm, exp, nil); len(r.Missing) != 3 || len(r.Extra) != 0 {
		t.Errorf("no pages at all: missing %v, extra %v", r.Missing, r.Extra)
	}
}

// TestPagesKeepFiring: ProviderDown's keep_firing_for holds it through a short gap between two
// outages of a provider. An outage that begins before the first surely resolved is not a must
// page of its own, and the first page may resolve only after it; an outage that begins later
// must page again, and the first page must resolve in its own time.
func TestPagesKeepFiring(t *testing.T) {
	tm := Timing{
		Interval: 2 * time.Second, Timeout: 1500 * time.Millisecond, Scrape: 500 * time.Millisecond, Eval: 500 * time.Millisecond,
		GroupWait: 250 * time.Millisecond, GroupInterval: 2500 * time.Millisecond,
		For:           map[string]time.Duration{alertTargetDown: 2500 * time.Millisecond, alertProviderDown: 2500 * time.Millisecond},
		KeepFiringFor: map[string]time.Duration{alertProviderDown: 2 * time.Second},
		Severity:      map[string]string{alertTargetDown: "warning", alertProviderDown: "critical"},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sp := func(from, to float64) span {
		return span{Fault: "rbac-removed", OuterFrom: at(from), InnerFrom: at(from + 0.1), InnerTo: at(to), OuterTo: at(to + 0.1)}
	}
	// Lag 4.5 s, keep 2 s, an evaluation 0.5 s: a gap under 7 s may hold the first page.
	// 10-30 and 33-50 (a gap of 3 s) are one run; 70-90 (a gap of 20 s) pages on its own.
	exp := expectations(tm, map[string][]string{"kube": {"api"}}, map[TargetKey][]span{{"kube", "api"}: {sp(10, 30), sp(33, 50), sp(70, 90)}})
	var must []string
	for _, e := range exp {
		if e.Must {
			must = append(must, e.Why)
		}
	}
	if len(must) != 2 || !strings.Contains(must[0], "00:00:10") || !strings.Contains(must[1], "00:01:10") {
		t.Fatalf("must pages: %q, want the outages at 10 s and 70 s", must)
	}
	page := func(fired, resolved float64) *Page {
		return &Page{Alert: alertProviderDown, Provider: "kube", Severity: "critical", Fired: at(fired), Resolved: at(resolved)}
	}
	// The first page held through the short gap: resolved after the second outage, in time.
	if r := judgePages(tm, exp, []*Page{page(18, 56), page(78, 96)}); len(r.Missing)+len(r.Late)+len(r.LateResolved)+len(r.Extra) != 0 {
		t.Errorf("held through the gap: missing %v, late %v, late resolutions %v, extra %v", r.Missing, r.Late, r.LateResolved, r.Extra)
	}
	// The first page resolved in the gap and the second outage paged again: allowed.
	if r := judgePages(tm, exp, []*Page{page(18, 36), page(41, 56), page(78, 96)}); len(r.Missing)+len(r.Late)+len(r.LateResolved)+len(r.Extra) != 0 || r.Allowed != 1 {
		t.Errorf("paged again after the gap: missing %v, late %v, late resolutions %v, extra %v, allowed %d", r.Missing, r.Late, r.LateResolved, r.Extra, r.Allowed)
	}
	// TargetFailingChecks of a target below its threshold may fire and end many times.
	tm.Shadows = map[TargetKey]TargetKey{{"blip", "api"}: {"kube", "api"}}
	tm.Severity[alertFailingChecks] = "warning"
	withBlip := expectations(tm, map[string][]string{"kube": {"api"}, "blip": {"api"}}, map[TargetKey][]span{{"kube", "api"}: {sp(10, 30), sp(33, 50), sp(70, 90)}})
	failing := func(fired, resolved float64) *Page {
		return &Page{Alert: alertFailingChecks, Provider: "blip", Target: "api", Severity: "warning", Fired: at(fired), Resolved: at(resolved)}
	}
	if r := judgePages(tm, withBlip, []*Page{page(18, 56), page(78, 96), failing(20, 40), failing(60, 80)}); len(r.Extra) != 0 || r.Allowed != 2 {
		t.Errorf("TargetFailingChecks twice: extra %v, allowed %d; want both allowed", r.Extra, r.Allowed)
	}
	if r := judgePages(tm, withBlip, []*Page{page(18, 56), page(78, 96), failing(5, 8)}); len(r.Extra) != 1 {
		t.Errorf("TargetFailingChecks before any fault of its shadow: extra %v, want it extra", r.Extra)
	}

	// A page held from the first outage into the third (20 s later) resolves late, and the
	// third outage's own page is missing.
	if r := judgePages(tm, exp, []*Page{page(18, 96)}); len(r.LateResolved) != 1 || len(r.Missing) != 1 {
		t.Errorf("held across a long gap: late resolutions %v, missing %v", r.LateResolved, r.Missing)
	}
}

// TestJudgeObjects: an object may read the old reason for the grace after the truth changed,
// not longer; reads within the grace after the API server's outage and reads mirroring a
// wrong verdict are not the writer's.
func TestJudgeObjects(t *testing.T) {
	j := newJudge(t.Logf)
	hv1 := TargetKey{"kvm", "hv1"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	j.set(hv1, truth{Reasons: []checks.Reason{checks.ReasonReady}})
	j.begin(hv1, truth{Fault: "pool-destroyed", Reasons: []checks.Reason{kvm.ReasonPoolInactive}}, at(10))
	j.finish(hv1, at(10.1))
	j.begin(hv1, truth{After: "pool-destroyed", Reasons: []checks.Reason{checks.ReasonReady}}, at(30))
	j.finish(hv1, at(30.1))
	read := func(s float64, r checks.Reason) objectSeen {
		return objectSeen{At: at(s), Target: hv1, Up: r == checks.ReasonReady, Reason: r}
	}
	const grace = 7500 * time.Millisecond
	objs := []objectSeen{
		read(5, checks.ReasonReady),
		read(15, checks.ReasonReady), // within the grace of the fault
		read(18, checks.ReasonReady), // beyond it: wrong
		read(19, checks.ReasonReady), // the same episode
		read(20, kvm.ReasonPoolInactive),
		read(35, kvm.ReasonPoolInactive), // within the grace of the recovery
		read(40, kvm.ReasonPoolInactive), // beyond: wrong, unless excused
	}
	eps := j.judgeObjects(objs, grace, nil, nil)
	if len(eps) != 2 || eps[0].Reads != 2 || eps[0].Got != checks.ReasonReady || eps[1].Got != kvm.ReasonPoolInactive || !eps[1].First.Equal(at(40)) {
		t.Fatalf("episodes: %v", eps)
	}
	down := []span{{Fault: "apiserver-stopped", OuterFrom: at(16), InnerFrom: at(16), InnerTo: at(19), OuterTo: at(19.5)}}
	wrong := []Episode{{Target: hv1, Since: at(30.1), Last: at(34)}}
	if eps := j.judgeObjects(objs, grace, down, wrong); len(eps) != 0 {
		t.Errorf("excused reads counted: %v", eps)
	}
}
