package collector

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
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

// Scrape requests: the text format, uncompressed (the cheapest to serve), and what Prometheus
// sends by default (OpenMetrics first, gzip).
type benchRequest struct{ name, accept, acceptEncoding string }

var (
	prometheusRequest = benchRequest{"prometheus-gzip", acceptPrometheus, "gzip"}
	benchRequests     = []benchRequest{{"text", "text/plain; version=0.0.4", ""}, prometheusRequest}
)

// BenchmarkScrape is one full scrape of /metrics as the exporter serves it (promhttp over the
// registry, here empty, and the Gatherer), the body discarded. "cached" scrapes a snapshot
// already scraped once (a second scrape between two rounds); "new-snapshot" gives every scrape
// a snapshot it has not seen (the first scrape after a round, which builds its families): with
// one scrape per interval, every scrape is one, and it is all the CPU the exporter spends on
// /metrics per interval.
func BenchmarkScrape(b *testing.B) {
	for _, r := range benchRequests {
		for _, mode := range []string{"cached", "new-snapshot"} {
			for _, n := range []int{100, 1000, 5000, 10000} {
				b.Run(fmt.Sprintf("%s/%s/targets=%d", r.name, mode, n), func(b *testing.B) {
					benchmarkScrape(b, r.accept, r.acceptEncoding, mode, n)
				})
			}
		}
	}
}

func serve(reg *prometheus.Registry, snapshot func() *checks.Snapshot) http.Handler {
	return promhttp.HandlerFor(NewGatherer(snapshot).With(reg), promhttp.HandlerOpts{EnableOpenMetrics: true})
}

func benchmarkScrape(b *testing.B, accept, acceptEncoding, mode string, n int) {
	snap := bigSnapshot(n)
	get := func() *checks.Snapshot { return snap }
	if mode == "new-snapshot" {
		get = func() *checks.Snapshot {
			fresh := *snap // a new pointer: the Gatherer cannot know it is the same state
			return &fresh
		}
	}
	h := serve(prometheus.NewRegistry(), get)
	req, err := http.NewRequest(http.MethodGet, "/metrics", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, req)
	b.ReportAllocs()
	cpu := cpuTime(b)
	for b.Loop() {
		w.h = http.Header{}
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// manyTargets is a checker of many KVM hosts that are all up, for the memory benchmark.
type manyTargets struct {
	name    string
	targets []string
}

func (m manyTargets) Name() string              { return m.name }
func (m manyTargets) Type() checks.ProviderType { return kvm.Type }
func (m manyTargets) Targets() []string         { return m.targets }
func (m manyTargets) Check(context.Context) []checks.TargetResult {
	out := make([]checks.TargetResult, len(m.targets))
	for i, t := range m.targets {
		out[i] = checks.TargetResult{Target: t, Up: true, Reason: checks.ReasonReady, Duration: time.Millisecond,
			Samples: kvm.PoolSamples("default", 1<<40, 0, 1<<39)}
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

// vmRSS is the resident memory of the process (VmRSS in /proc/self/status), in bytes.
func vmRSS(b *testing.B) uint64 { return vmRSSOf(b, "/proc/self/status") }

// vmRSSOf is the resident memory of the process whose status file is path, in bytes.
func vmRSSOf(b *testing.B, path string) uint64 {
	status, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatalf("parse %q: %v", line, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS in %s", path)
	return 0
}

// BenchmarkHeap10000Targets reports the memory the exporter holds for 10,000 targets: a runner
// that has completed one round over them (its memory and published snapshot) and /metrics
// having served it as Prometheus asks for it (OpenMetrics, gzip), so that whatever is kept per
// snapshot for that is held. "heap-MiB" is the whole heap in use after GC;
// "delta-MiB" is the part these structures add to an idle process (the benchmark binary's own
// heap); "rss-MiB" is the resident memory of the whole process (VmRSS) at the end, which also
// counts memory the Go runtime has freed but not yet returned to the system. Run each path in
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
		h := serve(prometheus.NewRegistry(), r.Current)
		for _, br := range []benchRequest{prometheusRequest} {
			req, err := http.NewRequest(http.MethodGet, "/metrics", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Accept", br.accept)
			if br.acceptEncoding != "" {
				req.Header.Set("Accept-Encoding", br.acceptEncoding)
			}
			h.ServeHTTP(&discard{h: http.Header{}}, req)
		}
		after := heapInUse()
		rss := vmRSS(b)
		runtime.KeepAlive(r)
		runtime.KeepAlive(h)
		cancel()
		<-done
		b.ReportMetric(float64(after)/(1<<20), "heap-MiB")
		b.ReportMetric((float64(after)-float64(before))/(1<<20), "delta-MiB")
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	}
}

// BenchmarkScrapeHTTP10000Targets is a scrape of 10,000 targets over loopback HTTP, the body
// read to the end by a client in the same process: what BenchmarkScrape leaves out (writing the
// body to a socket, the HTTP server, a client that reads it, and the Go runtime and process
// metrics every exporter serves beside its own) is counted in cpu-ms/op too.
func BenchmarkScrapeHTTP10000Targets(b *testing.B) {
	snap := bigSnapshot(10000)
	for _, r := range benchRequests {
		b.Run(r.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			h := serve(reg, fixed(snap))
			srv := httptest.NewServer(h)
			defer srv.Close()
			// The client must not decompress: Prometheus reads the gzip body itself, and
			// the benchmark measures serving, not decompressing.
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer client.CloseIdleConnections()
			scrape := func() {
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Accept", r.accept)
				if r.acceptEncoding != "" {
					req.Header.Set("Accept-Encoding", r.acceptEncoding)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			scrape()
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				scrape()
			}
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
