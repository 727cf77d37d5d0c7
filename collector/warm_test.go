package collector

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// TestWarmBuildsWhatPrometheusScrapes: after Warm, the first scrapes of a snapshot as
// Prometheus sends them by default build nothing (neither the families nor an encoding) and
// answer what promhttp over a registry answers; a format Warm did not build is still built at
// its first scrape.
func TestWarmBuildsWhatPrometheusScrapes(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	opts := promhttp.HandlerOpts{EnableOpenMetrics: true}
	x := newExtras()
	plainReg, fastReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	plainReg.MustRegister(New(cur.Load))
	x.register(plainReg)
	x.register(fastReg)
	g := NewGatherer(cur.Load)
	p := pair{
		plain: promhttp.InstrumentMetricHandler(plainReg, promhttp.HandlerFor(plainReg, opts)),
		fast:  promhttp.InstrumentMetricHandler(fastReg, Handler(fastReg, g, opts)),
	}
	keys := g.warmKeys
	// OpenMetrics as Prometheus 2.42 and 3 negotiate it (their escaping differs), and text 0.0.4.
	var om, text int
	for _, k := range keys {
		if !k.gzip {
			t.Errorf("warm key %+v is not compressed", k)
		}
		switch k.format.FormatType() {
		case expfmt.TypeOpenMetrics:
			om++
		case expfmt.TypeTextPlain:
			text++
		}
	}
	if om != 2 || text != 1 {
		t.Fatalf("warm keys %+v; want 2 OpenMetrics and 1 text, gzip", keys)
	}

	for round, s := range []*checks.Snapshot{bigSnapshot(30), fullSnapshot(), bigSnapshot(7)} {
		s.Round = uint64(round + 1)
		cur.Store(s)
		g.Warm(context.Background())
		f := g.current.Load()
		if f == nil || f.snap != s {
			t.Fatalf("round %d: Warm did not build the families of the new snapshot", round)
		}
		if n := f.encoded.Load(); n != int64(len(keys)) {
			t.Fatalf("round %d: Warm built %d encodings, want %d", round, n, len(keys))
		}
		for range 2 {
			for _, pr := range prometheusRequests {
				compare(t, p, "/metrics", pr.accept, pr.acceptEncoding)
			}
		}
		if g.current.Load() != f {
			t.Fatalf("round %d: a scrape rebuilt the warmed families", round)
		}
		if n := f.encoded.Load(); n != int64(len(keys)) {
			t.Errorf("round %d: %d encodings after Prometheus's scrapes, want the %d Warm built", round, n, len(keys))
		}
		// Uncompressed text was not warmed: its first scrape builds it, once.
		compare(t, p, "/metrics", acceptText, "")
		compare(t, p, "/metrics", acceptText, "")
		if n := f.encoded.Load(); n != int64(len(keys))+1 {
			t.Errorf("round %d: %d encodings after an uncompressed scrape, want %d", round, n, len(keys)+1)
		}
	}
}

// TestScrapesDuringWarmShareTheWork: scrapes that arrive while Warm runs get the right answer
// and every encoding of the snapshot is still built exactly once.
func TestScrapesDuringWarmShareTheWork(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	g := NewGatherer(cur.Load)
	h := Handler(prometheus.NewRegistry(), g, promhttp.HandlerOpts{EnableOpenMetrics: true})
	for round := range 3 {
		s := bigSnapshot(2000)
		s.Round = uint64(round + 1)
		cur.Store(s)
		var wg sync.WaitGroup
		wg.Go(func() { g.Warm(context.Background()) })
		for _, pr := range prometheusRequests {
			wg.Go(func() {
				if r := get(t, h, "/metrics", pr.accept, pr.acceptEncoding); r.code != http.StatusOK {
					t.Errorf("status %d", r.code)
				}
			})
		}
		wg.Wait()
		f := g.current.Load()
		if f.snap != s {
			t.Fatalf("round %d: families of another snapshot", round)
		}
		if n := f.encoded.Load(); n != int64(len(g.warmKeys)) {
			t.Errorf("round %d: %d encodings built, want %d (one per key)", round, n, len(g.warmKeys))
		}
	}
}

// TestWarmStopsWithItsContext: a cancelled Warm builds nothing.
func TestWarmStopsWithItsContext(t *testing.T) {
	g := NewGatherer(fixed(fullSnapshot()))
	Handler(prometheus.NewRegistry(), g, promhttp.HandlerOpts{EnableOpenMetrics: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.Warm(ctx)
	if g.current.Load() != nil {
		t.Error("a cancelled Warm built the families")
	}
	g.Warm(context.Background())
	if f := g.current.Load(); f == nil || f.encoded.Load() != int64(len(g.warmKeys)) {
		t.Error("Warm did not build the families and their encodings")
	}
}
