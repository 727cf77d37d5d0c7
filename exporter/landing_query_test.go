package exporter

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// labelQuery is a status query of n distinct labels of 100 bytes each (label=name=value):
// 10,000 of them, the most net/url parses, make a 1 MB query.
func labelQuery(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte('&')
		}
		fmt.Fprintf(&b, "label=rack%%3D%0*d", 100-len("label=rack%3D")-1, i)
	}
	return b.String()
}

// manyProviders is a fleet of 20 providers of 50 down targets each, every one labelled
// rack=r1: a label query of other racks hides every target of every provider.
func manyProviders() (*checks.Snapshot, time.Time) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := &checks.Snapshot{Round: 3, RoundStarted: now.Add(-2 * time.Second)}
	for p := range 20 {
		ps := checks.ProviderState{Name: fmt.Sprintf("kvm-%02d", p), Type: kvm.Type,
			Labels: checks.Labels{Provider: map[string]string{"rack": "r1"}}}
		for i := range 50 {
			ps.Targets = append(ps.Targets, checks.TargetState{TargetResult: checks.TargetResult{
				Target: fmt.Sprintf("hv-%02d", i), Reason: kvm.ReasonTCPUnreachable, Message: "m", CheckedAt: now.Add(-time.Second)},
				Since: now.Add(-time.Hour)})
		}
		s.Providers = append(s.Providers, ps)
	}
	return s, now
}

// renderQuery renders the status page of s for query and returns the answer's size and the
// least time of three renders.
func renderQuery(t testing.TB, e *Exporter, s *checks.Snapshot, now time.Time, query string) (int, time.Duration) {
	best, size := time.Duration(1<<62), 0
	for range 3 {
		rec := httptest.NewRecorder()
		start := time.Now()
		e.renderLanding(rec, httptest.NewRequest("GET", "/?"+query, nil), s, now)
		best = min(best, time.Since(start))
		if rec.Code != http.StatusOK {
			t.Fatalf("a query of %d bytes: %d %.300s", len(query), rec.Code, rec.Body.String())
		}
		size = rec.Body.Len()
	}
	return size, best
}

// TestStatusLabelFilterIsLinear: the status page's cost grows linearly with its label query.
// Machine-independent: the answer of a query 8 times as long is at most about 8 times as large
// (the notes repeated per provider name a few labels, not the whole query). Loosely timed: the
// render of the 8-times query takes less than 24 times as long as the short one's (a quadratic
// cost takes about 64 times; the least of three renders each, so that a busy machine does
// not decide). A query with more parameters than net/url parses is a 400, not an unfiltered page.
func TestStatusLabelFilterIsLinear(t *testing.T) {
	s, now := manyProviders()
	e := landingExporter()
	q1, q8 := labelQuery(1250), labelQuery(10000)
	if len(q8) < 1_000_000-10_000 {
		t.Fatalf("the long query is %d bytes, want about 1 MB", len(q8))
	}
	size1, took1 := renderQuery(t, e, s, now, q1)
	size8, took8 := renderQuery(t, e, s, now, q8)
	t.Logf("query %d bytes: page %d bytes in %s; query %d bytes: page %d bytes in %s", len(q1), size1, took1, len(q8), size8, took8)
	if size8 > 10*size1 {
		t.Errorf("a query 8 times as long makes a page %.1f times as large (%d bytes, then %d): the query is repeated per provider",
			float64(size8)/float64(size1), size1, size8)
	}
	if took8 > 24*took1 {
		t.Errorf("a query 8 times as long takes %.1f times as long (%s, then %s): want linear", float64(took8)/float64(took1), took1, took8)
	}

	rec := httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/?"+labelQuery(10001), nil), s, now)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "query") {
		t.Errorf("10,001 labels: %d %q, want 400 naming the query", rec.Code, rec.Body.String())
	}
}

// BenchmarkStatusLabelFilter1MB renders the status page of 20 providers of 50 targets for a
// 1 MB label query (10,000 labels of 100 bytes), which hides every target.
func BenchmarkStatusLabelFilter1MB(b *testing.B) {
	s, now := manyProviders()
	e := landingExporter()
	req := httptest.NewRequest("GET", "/?"+labelQuery(10000), nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		e.renderLanding(rec, req, s, now)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
