package exporter

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// bigFleet is a snapshot of providers×hosts KVM targets, one in fifty down.
func bigFleet(providers, hosts int) (*checks.Snapshot, time.Time) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := &checks.Snapshot{Round: 7, RoundStarted: now.Add(-10 * time.Second), RoundDuration: 3 * time.Second}
	// Every target has a full strip (shared: snapshots never modify it): the ready ones every
	// check Ready, the down ones failing for the last 20 of their checks, each with a title.
	var readyStrip, downStrip []checks.RecentCheck
	for i := range checks.RecentLength {
		at := now.Add(time.Duration(i-checks.RecentLength) * time.Minute)
		readyStrip = append(readyStrip, checks.RecentCheck{At: at, Up: true, Reason: checks.ReasonReady})
		c := checks.RecentCheck{At: at, Up: true, Reason: checks.ReasonReady}
		if i >= checks.RecentLength-20 {
			c = checks.RecentCheck{At: at, Reason: kvm.ReasonTCPUnreachable}
		}
		downStrip = append(downStrip, c)
	}
	for p := range providers {
		ps := checks.ProviderState{Name: fmt.Sprintf("kvm-%02d", p), Type: "kvm"}
		for h := range hosts {
			t := checks.TargetState{TargetResult: checks.TargetResult{Target: fmt.Sprintf("hv-%02d-%04d", p, h), Up: true,
				Reason: checks.ReasonReady, Message: "pool default running", Duration: 3 * time.Millisecond, CheckedAt: now.Add(-5 * time.Second)},
				Since: now.Add(-time.Hour), Recent: readyStrip}
			if (p+h)%50 == 3 {
				t.Up, t.Reason, t.Message = false, kvm.ReasonTCPUnreachable, fmt.Sprintf("dial tcp 198.18.%d.%d:22: i/o timeout", p, h%250)
				t.Recent = downStrip
			}
			ps.Targets = append(ps.Targets, t)
		}
		s.Providers = append(s.Providers, ps)
	}
	return s, now
}

// TestLandingPagesReachEveryTarget: walking the pages of each filter lists every selected
// target exactly once, the down targets of every provider before any ready one, at most
// landingPageRows a page, and the page links lead from the first page to the last.
func TestLandingPagesReachEveryTarget(t *testing.T) {
	s, now := bigFleet(4, 300) // 1,200 targets, 24 down
	e := landingExporter()
	for _, f := range []landingFilter{{}, {State: "down"}, {State: "up"}, {Provider: "kvm-02"}} {
		t.Run(fmt.Sprintf("provider=%s,state=%s", f.Provider, f.State), func(t *testing.T) {
			var want []string
			for _, p := range s.Providers {
				for _, tg := range p.Targets {
					if (f.Provider == "" || f.Provider == p.Name) && (f.State == "" || (f.State == "up") == tg.Up) {
						want = append(want, tg.Target)
					}
				}
			}
			var seen []string
			sawReady := false
			next := "first"
			for f.Page = 1; next != ""; f.Page++ {
				d := e.landingData(s, f, now)
				if d.Pager.Page != f.Page || d.Pager.Total != len(want) {
					t.Fatalf("page %d: pager %+v, want page %d of %d rows", f.Page, d.Pager, f.Page, len(want))
				}
				rows := 0
				for _, p := range d.Providers {
					for _, r := range p.Down {
						if sawReady {
							t.Errorf("page %d: down target %s listed after a ready one", f.Page, r.Target)
						}
						seen = append(seen, r.Target)
					}
					rows += len(p.Down)
				}
				for _, p := range d.Providers {
					for _, r := range p.Up {
						sawReady = true
						seen = append(seen, r.Target)
					}
					rows += len(p.Up)
				}
				if rows > landingPageRows || rows != d.Pager.Last-d.Pager.First+1 {
					t.Errorf("page %d: %d rows, pager says %d–%d", f.Page, rows, d.Pager.First, d.Pager.Last)
				}
				if f.Page > 1 && d.Pager.Prev == "" {
					t.Errorf("page %d has no link to the previous page", f.Page)
				}
				next = d.Pager.Next
				if next != "" && !strings.Contains(next, fmt.Sprintf("page=%d", f.Page+1)) {
					t.Errorf("page %d links %q as the next page", f.Page, next)
				}
				if f.Page > 20 {
					t.Fatal("more than 20 pages")
				}
			}
			slices.Sort(want)
			slices.Sort(seen)
			if !slices.Equal(seen, want) {
				t.Errorf("the pages list %d targets, want each of %d once", len(seen), len(want))
			}
		})
	}
}

// TestLandingPageQuery: a bad page number is a 400 naming what is allowed; a page past the
// last one says so and links back; the links keep the filter.
func TestLandingPageQuery(t *testing.T) {
	s, now := bigFleet(2, 300)
	e := landingExporter()
	for _, q := range []string{"page=0", "page=-1", "page=two", "page=1.5"} {
		rec := httptest.NewRecorder()
		e.renderLanding(rec, httptest.NewRequest("GET", "/?"+q, nil), s, now)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "page must be a whole number from 1") {
			t.Errorf("%s: %d %q, want 400 saying what a page is", q, rec.Code, rec.Body.String())
		}
	}
	rec := httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/?state=up&provider=kvm-01&page=9", nil), s, now)
	body := rec.Body.String()
	for _, want := range []string{"No targets on this page: the filter selects 294", "page 9 of 2", `href="?page=2&amp;provider=kvm-01&amp;state=up"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page past the last lacks %q", want)
		}
	}
}

// TestLandingPageBounded: at 20,000 targets a page stays under 1 MB, and a render allocates
// about what it does at 1,200 targets: the rows built are the page's, not the fleet's.
func TestLandingPageBounded(t *testing.T) {
	e := landingExporter()
	req := httptest.NewRequest("GET", "/", nil)
	size := func(s *checks.Snapshot, now time.Time) int {
		rec := &discardWriter{header: http.Header{}}
		e.renderLanding(rec, req, s, now)
		return rec.n
	}
	big, now := bigFleet(20, 1000)
	small, _ := bigFleet(4, 300)
	if n := size(big, now); n > 1<<20 {
		t.Errorf("the page of 20,000 targets is %d bytes, want under 1 MB", n)
	}
	allocs := func(s *checks.Snapshot) float64 {
		return testing.AllocsPerRun(3, func() { size(s, now) })
	}
	// Both pages hold 250 rows; the larger fleet has 16 more provider rows and counts 20,000
	// targets without building them.
	if b, s := allocs(big), allocs(small); b > 1.25*s {
		t.Errorf("a render allocates %.0f times at 20,000 targets and %.0f at 1,200: it grows with the fleet", b, s)
	}
}

// TestLandingInFlightLimit: past landingMaxInFlight renders in flight the page answers 503
// with Retry-After, and serves again once a slot is free.
func TestLandingInFlightLimit(t *testing.T) {
	e := landingExporter()
	e.landingSlots = make(chan struct{}, landingMaxInFlight)
	for range landingMaxInFlight {
		e.landingSlots <- struct{}{}
	}
	rec := httptest.NewRecorder()
	e.serveLanding(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "at most 4") {
		t.Errorf("with every slot taken: %d %q (Retry-After %q), want 503 naming the limit", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	<-e.landingSlots
	e.runner = checks.NewRunner(checks.Options{Interval: time.Minute, Timeout: 15 * time.Second}, nil)
	rec = httptest.NewRecorder()
	e.serveLanding(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("with a slot free: %d, want 200", rec.Code)
	}
	if len(e.landingSlots) != landingMaxInFlight-1 {
		t.Errorf("%d slots taken after the render, want its slot given back (%d)", len(e.landingSlots), landingMaxInFlight-1)
	}
}

// BenchmarkLanding20000Targets renders page 1 of a 20,000-target fleet (20 KVM providers of
// 1,000 hosts, 400 down): compare with BenchmarkLanding1000Targets.
func BenchmarkLanding20000Targets(b *testing.B) {
	s, now := bigFleet(20, 1000)
	e := landingExporter()
	req := httptest.NewRequest("GET", "/", nil)
	for b.Loop() {
		rec := &discardWriter{header: http.Header{}}
		e.renderLanding(rec, req, s, now)
		b.SetBytes(int64(rec.n))
	}
}
