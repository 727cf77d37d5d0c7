package collector

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

func TestCRC32Combine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 100_000)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, split := range []int{0, 1, 7, 4096, 50_000, 99_999, 100_000} {
		a, b := data[:split], data[split:]
		got := crc32Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(len(b)))
		if want := crc32.ChecksumIEEE(data); got != want {
			t.Errorf("split at %d: combined CRC %08x, want %08x", split, got, want)
		}
	}
}

// extras are metrics of the rest of the exporter, named to fall before, between and after the
// snapshot's families, so that a response interleaves fresh and cached parts.
type extras struct {
	first, kvmPool, between *prometheus.GaugeVec
	last                    prometheus.Counter
}

func newExtras() *extras {
	x := &extras{
		first: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "aaa_first", Help: "Sorts before everything."},
			[]string{"le"}),
		kvmPool: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "proxy_operator_kvm_pool_connections",
			Help: "Sorts just before the storage pool families."}, []string{"provider"}),
		between: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "proxy_operator_provider_check_s",
			Help: "Sorts between two snapshot families."}, []string{"x"}),
		last: prometheus.NewCounter(prometheus.CounterOpts{Name: "zzz_last", Help: "Sorts after everything."}),
	}
	x.first.WithLabelValues("0.5").Set(1.5)
	x.kvmPool.WithLabelValues("kvm-00").Set(3)
	x.between.WithLabelValues("a \"quoted\"\nvalue").Set(-2)
	x.last.Add(42)
	return x
}

func (x *extras) register(reg prometheus.Registerer) {
	reg.MustRegister(x.first, x.kvmPool, x.between, x.last)
}

// pair is the same exporter served twice: through promhttp over a registry holding the
// collector (the plain path) and through Handler over a registry without it and a Gatherer.
type pair struct {
	plain, fast http.Handler
}

func newPair(snap func() *checks.Snapshot, opts promhttp.HandlerOpts) pair {
	x := newExtras()
	plainReg := prometheus.NewRegistry()
	plainReg.MustRegister(New(snap))
	x.register(plainReg)
	fastReg := prometheus.NewRegistry()
	x.register(fastReg)
	return pair{
		// Both instrumented as the exporter is, so the fresh part holds changing counters.
		plain: promhttp.InstrumentMetricHandler(plainReg, promhttp.HandlerFor(plainReg, opts)),
		fast:  promhttp.InstrumentMetricHandler(fastReg, Handler(fastReg, NewGatherer(snap), opts)),
	}
}

type response struct {
	code   int
	header http.Header
	body   []byte // decompressed
}

func get(t *testing.T, h http.Handler, target, accept, acceptEncoding string) response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Header().Get("Content-Encoding") == "gzip" {
		body = gunzip(t, body)
	}
	return response{code: rec.Code, header: rec.Header(), body: body}
}

// gunzip decompresses exactly one gzip member (checking its CRC and size) and fails if
// anything follows it.
func gunzip(t testing.TB, b []byte) []byte {
	t.Helper()
	in := bytes.NewReader(b)
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatalf("gzip header: %v", err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gzip body: %v", err)
	}
	if in.Len() != 0 {
		t.Fatalf("%d bytes after the gzip member", in.Len())
	}
	return out
}

const (
	acceptText       = "text/plain; version=0.0.4"
	acceptOpenMetric = "application/openmetrics-text; version=1.0.0"
	acceptProtobuf   = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
	// What Prometheus 3 sends by default.
	acceptPrometheus = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
		"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
		"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)

var (
	accepts = []string{"", "*/*", acceptText, "text/plain;version=1.0.0;escaping=allow-utf-8", acceptOpenMetric,
		"application/openmetrics-text; version=0.0.1; escaping=underscores", acceptPrometheus, acceptProtobuf,
		"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=text"}
	acceptEncodings = []string{"", "gzip", "identity", "gzip;q=0", "deflate, gzip, br, zstd", "br", "*", "gzip;q=0.5, identity"}
)

// compare fails unless plain and fast answer the same status, headers and (decompressed) body,
// and checks the body is well formed for its format.
func compare(t *testing.T, p pair, target, accept, acceptEncoding string) {
	t.Helper()
	want := get(t, p.plain, target, accept, acceptEncoding)
	got := get(t, p.fast, target, accept, acceptEncoding)
	what := fmt.Sprintf("%s Accept %q Accept-Encoding %q", target, accept, acceptEncoding)
	if got.code != want.code {
		t.Fatalf("%s: status %d, want %d", what, got.code, want.code)
	}
	for _, h := range []string{"Content-Type", "Content-Encoding", "Vary"} {
		if g, w := strings.Join(got.header.Values(h), ", "), strings.Join(want.header.Values(h), ", "); g != w {
			t.Errorf("%s: %s %q, want %q", what, h, g, w)
		}
	}
	format := expfmt.Format(got.header.Get("Content-Type"))
	if format.FormatType() == expfmt.TypeProtoDelim && got.code == http.StatusOK {
		// Protobuf carries the creation time of counters, and each side has its own
		// promhttp_metric_handler_requests_total: compare the families without it.
		g, w := decode(t, got.body, format), decode(t, want.body, format)
		for _, mfs := range []map[string]*dto.MetricFamily{g, w} {
			for _, m := range mfs["promhttp_metric_handler_requests_total"].GetMetric() {
				m.Counter.CreatedTimestamp = nil
			}
		}
		equalFamilies(t, what, g, w)
		return
	}
	switch format.FormatType() {
	case expfmt.TypeProtoText, expfmt.TypeProtoCompact:
		// The same, in protobuf's text forms.
		got.body = createdTimestamp.ReplaceAll(got.body, nil)
		want.body = createdTimestamp.ReplaceAll(want.body, nil)
	case expfmt.TypeOpenMetrics:
		// And as OpenMetrics' created lines, when they are on.
		got.body = handlerCreatedLine.ReplaceAll(got.body, nil)
		want.body = handlerCreatedLine.ReplaceAll(want.body, nil)
	}
	if !bytes.Equal(got.body, want.body) {
		t.Fatalf("%s: bodies differ\n--- got\n%s\n--- want\n%s", what, head(got.body), head(want.body))
	}
	if got.code != http.StatusOK {
		return
	}
	switch format.FormatType() {
	case expfmt.TypeTextPlain:
		// Equal bytes parse to equal families; parsing checks the text is valid at all.
		parser := expfmt.NewTextParser(model.UTF8Validation)
		g, err := parser.TextToMetricFamilies(bytes.NewReader(got.body))
		if err != nil {
			t.Fatalf("%s: parse: %v", what, err)
		}
		parser = expfmt.NewTextParser(model.UTF8Validation)
		w, err := parser.TextToMetricFamilies(bytes.NewReader(want.body))
		if err != nil {
			t.Fatalf("%s: parse the plain response: %v", what, err)
		}
		equalFamilies(t, what, g, w)
	case expfmt.TypeOpenMetrics:
		if n := bytes.Count(got.body, []byte("# EOF\n")); n != 1 || !bytes.HasSuffix(got.body, []byte("# EOF\n")) {
			t.Errorf("%s: # EOF %d times, last line %q; want once, at the end", what, n, lastLine(got.body))
		}
	}
}

var (
	createdTimestamp   = regexp.MustCompile(`created_timestamp:\s*\{[^}]*\}`)
	handlerCreatedLine = regexp.MustCompile(`(?m)^promhttp_metric_handler_requests_created\{[^\n]*\n`)
)

func decode(t *testing.T, b []byte, format expfmt.Format) map[string]*dto.MetricFamily {
	t.Helper()
	out := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(bytes.NewReader(b), format)
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("decode protobuf: %v", err)
		}
		out[mf.GetName()] = &mf
	}
}

func equalFamilies(t *testing.T, what string, got, want map[string]*dto.MetricFamily) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d families, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		if g := got[name]; !proto.Equal(g, w) {
			t.Errorf("%s: family %s differs:\n got %v\nwant %v", what, name, g, w)
		}
	}
}

func head(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	return lines[len(lines)-1]
}

// duplicated has the same target twice in one provider, which a registry refuses to serve.
func duplicated() *checks.Snapshot {
	s := fullSnapshot()
	p := &s.Providers[0]
	p.Targets = append(p.Targets, p.Targets[0])
	return s
}

// TestHandlerServesWhatPromhttpServes: for every format and compression Prometheus or a
// person may ask for, the handler answers what promhttp over a registry holding the collector
// answers: same status, headers and body once decompressed, gzip as one valid member.
func TestHandlerServesWhatPromhttpServes(t *testing.T) {
	snaps := map[string]*checks.Snapshot{
		"before-first-round": nil,
		"full":               fullSnapshot(),
		"fleet":              bigSnapshot(60),
		"no-providers":       {Round: 1, RoundDuration: time.Second},
		"no-targets":         {Round: 2, Providers: []checks.ProviderState{{Name: "empty", Type: checks.TypeGCP}}},
		"duplicate-series":   duplicated(),
	}
	for name, s := range snaps {
		t.Run(name, func(t *testing.T) {
			p := newPair(fixed(s), promhttp.HandlerOpts{EnableOpenMetrics: true})
			for _, accept := range accepts {
				for _, ae := range acceptEncodings {
					compare(t, p, "/metrics", accept, ae)
				}
			}
			// A name filter selects families from both parts.
			compare(t, p, "/metrics?name[]=proxy_operator_provider_target_up&name[]=zzz_last", acceptText, "gzip")
		})
	}
	t.Run("text-only", func(t *testing.T) {
		p := newPair(fixed(fullSnapshot()), promhttp.HandlerOpts{})
		for _, accept := range accepts {
			compare(t, p, "/metrics", accept, "gzip")
		}
	})
	t.Run("created-lines", func(t *testing.T) {
		p := newPair(fixed(fullSnapshot()),
			promhttp.HandlerOpts{EnableOpenMetrics: true, EnableOpenMetricsTextCreatedSamples: true})
		for _, ae := range []string{"", "gzip"} {
			compare(t, p, "/metrics", acceptPrometheus, ae)
		}
		r := get(t, p.fast, "/metrics", acceptPrometheus, "gzip")
		if !bytes.Contains(r.body, []byte("\nzzz_last_created ")) {
			t.Errorf("no created line for zzz_last:\n%s", head(r.body))
		}
	})
	t.Run("no-compression", func(t *testing.T) {
		p := newPair(fixed(fullSnapshot()), promhttp.HandlerOpts{EnableOpenMetrics: true, DisableCompression: true})
		compare(t, p, "/metrics", acceptPrometheus, "gzip")
	})
}

// failing is a collector whose metric cannot be collected.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("the source is unreachable"))
}

// TestFailingCollectorFailsTheScrapeAsBefore: an error of the registry's part answers what
// promhttp answered when the registry also held the snapshot's collector.
func TestFailingCollectorFailsTheScrapeAsBefore(t *testing.T) {
	f := failing{prometheus.NewDesc("broken_metric", "Cannot be collected.", nil, nil)}
	plainReg := prometheus.NewRegistry()
	plainReg.MustRegister(New(fixed(fullSnapshot())), f)
	fastReg := prometheus.NewRegistry()
	fastReg.MustRegister(f)
	p := pair{plain: promhttp.HandlerFor(plainReg, promhttp.HandlerOpts{EnableOpenMetrics: true}),
		fast: Handler(fastReg, NewGatherer(fixed(fullSnapshot())), promhttp.HandlerOpts{EnableOpenMetrics: true})}
	for _, accept := range []string{acceptText, acceptPrometheus, acceptProtobuf} {
		compare(t, p, "/metrics", accept, "gzip")
	}
	if r := get(t, p.fast, "/metrics", acceptPrometheus, "gzip"); r.code != http.StatusInternalServerError ||
		!bytes.Contains(r.body, []byte("the source is unreachable")) {
		t.Errorf("status %d, body %q; want 500 with the collector's error", r.code, r.body)
	}
}

func TestDuplicateSeriesFailTheScrapeAsTheRegistryDoes(t *testing.T) {
	p := newPair(fixed(duplicated()), promhttp.HandlerOpts{EnableOpenMetrics: true})
	r := get(t, p.fast, "/metrics", acceptPrometheus, "gzip")
	if r.code != http.StatusInternalServerError || !bytes.Contains(r.body, []byte("was collected before")) {
		t.Errorf("status %d, body %q; want 500 naming the duplicate", r.code, head(r.body))
	}
}

// TestHandlerFollowsSnapshots: every scrape serves the snapshot current at that moment, in
// every format, although each format is encoded once per snapshot.
func TestHandlerFollowsSnapshots(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	p := newPair(cur.Load, promhttp.HandlerOpts{EnableOpenMetrics: true})
	for i, s := range []*checks.Snapshot{nil, bigSnapshot(20), bigSnapshot(20), fullSnapshot(), bigSnapshot(5), nil} {
		if s != nil {
			s.Round = uint64(i)
		}
		cur.Store(s)
		for range 2 { // the second scrape is served from the cached encodings
			for _, accept := range []string{acceptText, acceptPrometheus, acceptProtobuf} {
				for _, ae := range []string{"", "gzip"} {
					compare(t, p, "/metrics", accept, ae)
				}
			}
		}
	}
}

// TestGatherMatchesRegistry: Merge gathers exactly the families a registry holding the
// collector gathers.
func TestGatherMatchesRegistry(t *testing.T) {
	for name, s := range map[string]*checks.Snapshot{"nil": nil, "full": fullSnapshot(), "fleet": bigSnapshot(120)} {
		x := newExtras()
		plainReg := prometheus.NewPedanticRegistry()
		plainReg.MustRegister(New(fixed(s)))
		x.register(plainReg)
		reg := prometheus.NewPedanticRegistry()
		x.register(reg)
		want, err := plainReg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Merge(reg, NewGatherer(fixed(s))).Gather()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d families, want %d", name, len(got), len(want))
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Errorf("%s: family %d:\n got %v\nwant %v", name, i, got[i], want[i])
			}
		}
	}
}

func TestMergeRefusesASharedName(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "proxy_operator_provider_info", Help: "Clash."}))
	g := NewGatherer(fixed(fullSnapshot()))
	if _, err := Merge(reg, g).Gather(); err == nil || !strings.Contains(err.Error(), "proxy_operator_provider_info") {
		t.Errorf("Gather: %v; want an error naming the shared family", err)
	}
	r := get(t, Handler(reg, g, promhttp.HandlerOpts{}), "/metrics", acceptText, "gzip")
	if r.code != http.StatusInternalServerError {
		t.Errorf("status %d; want 500", r.code)
	}
}

func TestReservationRefusesASharedNameAtRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGatherer(fixed(fullSnapshot()))
	if err := reg.Register(g.Reservation()); err != nil {
		t.Fatal(err)
	}
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "proxy_operator_provider_info", Help: "Clash."})
	if err := reg.Register(clash); err == nil {
		t.Error("a gauge of a snapshot family's name was registered beside the reservation")
	}
	// Reserved names cost nothing at a scrape and change nothing in it.
	p := pair{plain: promhttp.HandlerFor(func() prometheus.Gatherer {
		r := prometheus.NewRegistry()
		r.MustRegister(New(fixed(fullSnapshot())))
		return r
	}(), promhttp.HandlerOpts{}), fast: Handler(reg, g, promhttp.HandlerOpts{})}
	compare(t, p, "/metrics", acceptText, "gzip")
}

// blocking is a collector that holds a scrape until released.
type blocking struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Describe(chan<- *prometheus.Desc) {}
func (b *blocking) Collect(chan<- prometheus.Metric) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
}

func TestHandlerBoundsRequestsInFlight(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b)
	h := Handler(reg, NewGatherer(fixed(fullSnapshot())), promhttp.HandlerOpts{MaxRequestsInFlight: 1})
	var wg sync.WaitGroup
	var first response
	wg.Go(func() { first = get(t, h, "/metrics", acceptText, "") })
	<-b.entered
	second := get(t, h, "/metrics", acceptText, "")
	close(b.release)
	wg.Wait()
	if first.code != http.StatusOK {
		t.Errorf("first scrape: status %d", first.code)
	}
	if second.code != http.StatusServiceUnavailable ||
		!strings.Contains(string(second.body), "Limit of concurrent requests reached (1)") {
		t.Errorf("second scrape: status %d, body %q; want 503 with promhttp's message", second.code, second.body)
	}
}

// TestHandlerConcurrentScrapesWhileSnapshotsChange: scrapes in every format race snapshot
// changes (run with -race); every response is complete and well formed.
func TestHandlerConcurrentScrapesWhileSnapshotsChange(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	cur.Store(bigSnapshot(100))
	h := Handler(prometheus.NewRegistry(), NewGatherer(cur.Load), promhttp.HandlerOpts{EnableOpenMetrics: true, MaxRequestsInFlight: 10})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := bigSnapshot(100 - i%20)
			s.Round = uint64(i)
			cur.Store(s)
			time.Sleep(time.Millisecond)
		}
	})
	var scrapers sync.WaitGroup
	for _, accept := range []string{acceptText, acceptOpenMetric, acceptProtobuf} {
		for _, ae := range []string{"", "gzip"} {
			scrapers.Go(func() {
				for range 10 {
					r := get(t, h, "/metrics", accept, ae)
					if r.code != http.StatusOK {
						t.Errorf("%s %s: status %d", accept, ae, r.code)
						return
					}
					if accept == acceptProtobuf {
						decode(t, r.body, expfmt.Format(r.header.Get("Content-Type")))
						continue
					}
					if !bytes.Contains(r.body, []byte("proxy_operator_provider_target_up{")) {
						t.Errorf("%s %s: no target_up series", accept, ae)
					}
					if accept == acceptText {
						parser := expfmt.NewTextParser(model.UTF8Validation)
						if _, err := parser.TextToMetricFamilies(bytes.NewReader(r.body)); err != nil {
							t.Errorf("parse: %v", err)
						}
					}
				}
			})
		}
	}
	scrapers.Wait()
	close(stop)
	wg.Wait()
}

// TestHandlerEncodesEachSnapshotOncePerFormat: text and OpenMetrics scrapes, compressed or not,
// are served from encodings built at the first scrape of a snapshot in that format; the other
// formats (protobuf here) are left to promhttp and build none.
func TestHandlerEncodesEachSnapshotOncePerFormat(t *testing.T) {
	g := NewGatherer(fixed(fullSnapshot()))
	h := Handler(prometheus.NewRegistry(), g, promhttp.HandlerOpts{EnableOpenMetrics: true})
	scrape := func() {
		for _, accept := range []string{acceptText, acceptPrometheus, acceptProtobuf} {
			for _, ae := range []string{"", "gzip"} {
				if r := get(t, h, "/metrics", accept, ae); r.code != http.StatusOK {
					t.Fatalf("%s %s: status %d", accept, ae, r.code)
				}
			}
		}
	}
	scrape()
	f := g.current.Load()
	built := map[encodingKey]*encoding{}
	for k, e := range f.encodings {
		built[k] = e.enc
	}
	negotiated := func(accept string) expfmt.Format {
		return expfmt.NegotiateAccept(http.Header{"Accept": {accept}}, expfmt.DefaultOpenMetricsAcceptedFormats()...)
	}
	text, om := negotiated(acceptText), negotiated(acceptPrometheus)
	if text.FormatType() != expfmt.TypeTextPlain || om.FormatType() != expfmt.TypeOpenMetrics {
		t.Fatalf("negotiated %q and %q", text, om)
	}
	want := []encodingKey{{format: text}, {format: text, gzip: true}, {format: om}, {format: om, gzip: true}}
	if len(built) != len(want) {
		t.Errorf("%d encodings built, want %d: %v", len(built), len(want), built)
	}
	for _, k := range want {
		if built[k] == nil {
			t.Errorf("no encoding for %+v", k)
		}
	}
	scrape()
	if g.current.Load() != f {
		t.Fatal("the families were rebuilt for the same snapshot")
	}
	for k, e := range f.encodings {
		if built[k] != e.enc {
			t.Errorf("encoding %+v rebuilt for the same snapshot", k)
		}
	}
}
