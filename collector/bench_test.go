package collector

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// discard is a ResponseWriter that throws the body away, so the benchmark measures the scrape
// (gather and text encoding) rather than buffering the response.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// cpuTime is the CPU time the process has used so far (user and system, every thread, GC
// included). On a shared machine wall time per scrape depends on the neighbours; CPU time much less.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScrape is one full scrape of /metrics, as Prometheus does it: the registry gathers
// the collector's metrics and promhttp encodes them in the text format. "cached" scrapes a
// snapshot already scraped once (every scrape between two rounds); "new-snapshot" gives every
// scrape a snapshot it has not seen (the first scrape after a round, which renders it).
func BenchmarkScrape(b *testing.B) {
	for _, mode := range []string{"cached", "new-snapshot"} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/targets=%d", mode, n), func(b *testing.B) {
				snap := bigSnapshot(n)
				get := func() *checks.Snapshot { return snap }
				if mode == "new-snapshot" {
					get = func() *checks.Snapshot {
						fresh := *snap // a new pointer: the collector cannot know it is the same state
						return &fresh
					}
				}
				reg := prometheus.NewRegistry()
				reg.MustRegister(New(get))
				h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
				req, err := http.NewRequest(http.MethodGet, "/metrics", nil)
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Accept", "text/plain; version=0.0.4")
				w := &discard{h: http.Header{}}
				h.ServeHTTP(w, req) // the label cache is warm in steady state
				b.ReportAllocs()
				cpu := cpuTime(b)
				for b.Loop() {
					h.ServeHTTP(w, req)
				}
				b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// manyTargets is a checker of many KVM hosts that are all up, for the memory benchmark.
type manyTargets struct {
	name    string
	targets []string
}

func (m manyTargets) Name() string              { return m.name }
func (m manyTargets) Type() checks.ProviderType { return checks.TypeKVM }
func (m manyTargets) Targets() []string         { return m.targets }
func (m manyTargets) Check(context.Context) []checks.TargetResult {
	out := make([]checks.TargetResult, len(m.targets))
	for i, t := range m.targets {
		out[i] = checks.TargetResult{Target: t, Up: true, Reason: checks.ReasonReady, Duration: time.Millisecond,
			Pool: &checks.StoragePool{Name: "default", State: "running", CapacityBytes: 1 << 40, AvailableBytes: 1 << 39}}
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkHeap10000Targets reports the heap the exporter holds for 10,000 targets: a runner
// that has completed one round over them (its memory and published snapshot) and a collector
// that has served a scrape. "heap-MiB" is the whole heap in use after GC; "delta-MiB" is the
// part these structures add to an idle process (the benchmark binary's own heap).
func BenchmarkHeap10000Targets(b *testing.B) {
	const n, perProvider = 10000, 1000
	for b.Loop() {
		before := heapInUse()
		var cs []checks.Checker
		for p := range n / perProvider {
			m := manyTargets{name: fmt.Sprintf("kvm-%02d", p)}
			for h := range perProvider {
				m.targets = append(m.targets, fmt.Sprintf("hv-%02d-%04d.example.internal", p, h))
			}
			cs = append(cs, m)
		}
		r := checks.NewRunner(checks.Options{Interval: time.Hour, Timeout: time.Minute}, cs)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		<-r.FirstRound()
		reg := prometheus.NewRegistry()
		reg.MustRegister(New(r.Current))
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
		after := heapInUse()
		runtime.KeepAlive(r)
		runtime.KeepAlive(reg)
		cancel()
		<-done
		b.ReportMetric(float64(after)/(1<<20), "heap-MiB")
		b.ReportMetric((float64(after)-float64(before))/(1<<20), "delta-MiB")
	}
}
