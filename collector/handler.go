package collector

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Handler serves /metrics as promhttp.HandlerFor(Merge(reg, snap), opts) does, byte for byte
// once decompressed, but encodes each snapshot only once per exposition format: the text and
// OpenMetrics encodings of the snapshot's families (and their gzip compression) are kept with
// the snapshot, and a scrape writes them between the freshly encoded families of reg. Encoding
// 67,000 series again at every scrape was, after the registry's checks, the cost of a scrape
// of 10,000 targets.
//
// promhttp itself negotiates the format and the compression of every request (on an empty
// registry, so the answer is exactly its own); requests this handler does not encode itself
// (protobuf, a compression other than gzip, a name[] filter, an error) are served by promhttp
// over Merge(reg, snap). Options that change how errors are handled (Timeout, Registry, an
// ErrorHandling other than HTTPErrorOnError) are left to promhttp entirely.
func Handler(reg prometheus.Gatherer, snap *Gatherer, opts promhttp.HandlerOpts) http.Handler {
	if opts.Timeout > 0 || opts.Registry != nil || opts.ErrorHandling != promhttp.HTTPErrorOnError {
		return promhttp.HandlerFor(Merge(reg, snap), opts)
	}
	h := &handler{reg: reg, snap: snap, errorLog: opts.ErrorLog,
		createdLines: opts.EnableOpenMetricsTextCreatedSamples, limit: opts.MaxRequestsInFlight}
	if h.limit > 0 {
		h.inFlight = make(chan struct{}, h.limit)
	}
	inner := opts
	inner.MaxRequestsInFlight = 0 // the handler bounds both paths itself
	h.fallback = promhttp.HandlerFor(Merge(reg, snap), inner)
	probe := inner
	probe.ErrorLog = &h.probeLog
	h.probe = promhttp.HandlerFor(prometheus.Gatherers(nil), probe)
	snap.addWarmKeys(h.defaultKeys()...)
	return h
}

// prometheusRequests are the Accept and Accept-Encoding headers Prometheus scrapes with by
// default, whose encodings Gatherer.Warm builds before the first scrape of a snapshot.
var prometheusRequests = []struct{ accept, acceptEncoding string }{
	// Prometheus 2.42 (the 2.x releases before scrape_protocols): OpenMetrics first.
	{"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75," +
		"text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "gzip"},
	// Prometheus 3, default scrape_protocols: OpenMetrics first, UTF-8 names allowed.
	{"application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
		"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
		"text/plain;version=0.0.4;q=0.3,*/*;q=0.2", "gzip"},
	// Prometheus 3 with scrape_protocols: [PrometheusText0.0.4]: the text format.
	{"text/plain;version=0.0.4;q=0.6,*/*;q=0.5", "gzip"},
}

// defaultKeys returns the encodings this handler would build for prometheusRequests, as its
// own negotiation (promhttp's) decides them: the same keys a scrape by Prometheus uses.
func (h *handler) defaultKeys() []encodingKey {
	var keys []encodingKey
	for _, pr := range prometheusRequests {
		r, err := http.NewRequest(http.MethodGet, "/metrics", nil)
		if err != nil {
			continue // a constant request: cannot fail
		}
		r.Header.Set("Accept", pr.accept)
		r.Header.Set("Accept-Encoding", pr.acceptEncoding)
		if _, format, gzip, ok := h.negotiate(r); ok {
			keys = append(keys, encodingKey{format: format, gzip: gzip, createdLines: h.createdLines})
		}
	}
	return keys
}

type handler struct {
	reg          prometheus.Gatherer
	snap         *Gatherer
	errorLog     promhttp.Logger
	createdLines bool
	limit        int
	inFlight     chan struct{}
	fallback     http.Handler

	probeMu  sync.Mutex // serialises probes, so that probeLog belongs to one request
	probe    http.Handler
	probeLog probeLog
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.inFlight != nil {
		select {
		case h.inFlight <- struct{}{}:
			defer func() { <-h.inFlight }()
		default:
			// promhttp's own answer to the same situation.
			http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", h.limit),
				http.StatusServiceUnavailable)
			return
		}
	}
	if r.URL != nil && r.URL.RawQuery != "" && len(r.URL.Query()["name[]"]) > 0 {
		h.fallback.ServeHTTP(w, r)
		return
	}
	header, format, gzip, ok := h.negotiate(r)
	if !ok {
		h.fallback.ServeHTTP(w, r)
		return
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		h.fallback.ServeHTTP(w, r) // it gathers again and answers the error as promhttp does
		return
	}
	var (
		key     = encodingKey{format: format, gzip: gzip, createdLines: h.createdLines}
		snapMFs []*dto.MetricFamily
		snapEnc *encoding
	)
	if f := h.snap.families(); f != nil {
		if f.err != nil {
			h.fallback.ServeHTTP(w, r)
			return
		}
		snapMFs = f.mfs
		if snapEnc, err = f.encoding(key); err != nil {
			h.fallback.ServeHTTP(w, r)
			return
		}
	}
	plan, ok := mergePlan(mfs, snapMFs)
	if !ok {
		h.fallback.ServeHTTP(w, r) // a family name in both: Merge reports it
		return
	}

	for k, vs := range header {
		if k == "Vary" {
			w.Header()[k] = append(w.Header()[k], vs...)
		} else {
			w.Header()[k] = vs
		}
	}
	out := newSink(w, gzip)
	defer out.release()
	enc := key.encoder(&out.fresh) // the registry's families, encoded as the snapshot's were
	for _, step := range plan {
		if step.reg != nil {
			if err := enc.Encode(step.reg); err != nil {
				h.logEncodeError(err)
				return
			}
			continue
		}
		if err := out.cached(snapEnc.segs[step.snap]); err != nil {
			h.logEncodeError(err)
			return
		}
	}
	if closer, ok := enc.(expfmt.Closer); ok {
		// The final "# EOF" of OpenMetrics, once, after every family.
		if err := closer.Close(); err != nil {
			h.logEncodeError(err)
			return
		}
	}
	if err := out.finish(); err != nil {
		h.logEncodeError(err)
	}
}

func (h *handler) logEncodeError(err error) {
	if h.errorLog != nil {
		h.errorLog.Println("error encoding and sending metric family:", err)
	}
}

// negotiate asks promhttp which format and compression it would answer r with. ok is false
// when that is not text or OpenMetrics, compressed with gzip or not at all, without an error.
func (h *handler) negotiate(r *http.Request) (header http.Header, format expfmt.Format, gzip, ok bool) {
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	h.probeLog.failed = false
	rec := recorder{header: http.Header{}}
	h.probe.ServeHTTP(&rec, r)
	if h.probeLog.failed || (rec.code != 0 && rec.code != http.StatusOK) {
		return nil, "", false, false
	}
	format = expfmt.Format(rec.header.Get("Content-Type"))
	switch format.FormatType() {
	case expfmt.TypeTextPlain, expfmt.TypeOpenMetrics:
	default:
		return nil, "", false, false
	}
	switch rec.header.Get("Content-Encoding") {
	case "":
	case "gzip":
		gzip = true
	default:
		return nil, "", false, false
	}
	return rec.header, format, gzip, true
}

// probeLog notes that promhttp logged an error while negotiating (it then answers in a way
// the handler leaves to it).
type probeLog struct{ failed bool }

func (p *probeLog) Println(...any) { p.failed = true }

// recorder keeps the headers and status of the probe and drops its body.
type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// step is one family of a response: a family of the registry, or the index of a snapshot family.
type step struct {
	reg  *dto.MetricFamily
	snap int
}

// mergePlan orders the families of both sources by name; ok is false if a name is in both.
func mergePlan(reg, snap []*dto.MetricFamily) (plan []step, ok bool) {
	plan = make([]step, 0, len(reg)+len(snap))
	i := 0
	for _, mf := range reg {
		for i < len(snap) && snap[i].GetName() < mf.GetName() {
			plan = append(plan, step{snap: i})
			i++
		}
		if i < len(snap) && snap[i].GetName() == mf.GetName() {
			return nil, false
		}
		plan = append(plan, step{reg: mf})
	}
	for ; i < len(snap); i++ {
		plan = append(plan, step{snap: i})
	}
	return plan, true
}

// encodingKey is what an encoding of the snapshot's families depends on. The formats promhttp
// negotiates are few (a type, a version and an escaping scheme), so the encodings of one
// snapshot are too.
type encodingKey struct {
	format       expfmt.Format
	gzip         bool
	createdLines bool
}

// encoding is the snapshot's families encoded in one format, one segment per family.
type encoding struct {
	segs []segment
}

// segment is one family, encoded. Compressed, it is a run of complete deflate blocks that ends
// on a byte boundary and refers to no data before it, so it can be spliced into any deflate
// stream between two sync flushes; crc and size are those of the uncompressed text, which the
// gzip trailer covers.
type segment struct {
	data []byte
	crc  uint32
	size int64
}

// encodingEntry is one encoding of a snapshot's families, built once by whichever comes first:
// a scrape or Warm. The others wait for it rather than encode the same thing again.
type encodingEntry struct {
	once sync.Once
	enc  *encoding
	err  error
}

// encoding returns the encoding of the families for k, building it at the first request.
// Only callers of the same k wait for one another: a scrape in one format does not wait
// while another format is being encoded (by Warm or another scrape).
func (f *snapshotFamilies) encoding(k encodingKey) (*encoding, error) {
	f.mu.Lock()
	en := f.encodings[k]
	if en == nil {
		if f.encodings == nil {
			f.encodings = map[encodingKey]*encodingEntry{}
		}
		en = &encodingEntry{}
		f.encodings[k] = en
	}
	f.mu.Unlock()
	en.once.Do(func() {
		f.encoded.Add(1)
		// The families are immutable, so an error (which the encoders report only for
		// invalid families) would recur: it is kept like an encoding.
		if k.gzip {
			en.enc, en.err = f.compressed(k)
		} else {
			en.enc, en.err = f.uncompressed(k)
		}
	})
	return en.enc, en.err
}

// encoder is what promhttp encodes a response with for k.
func (k encodingKey) encoder(w io.Writer) expfmt.Encoder {
	var opts []expfmt.EncoderOption
	if k.createdLines {
		opts = append(opts, expfmt.WithCreatedLines())
	}
	return expfmt.NewEncoder(w, k.format, opts...)
}

// uncompressed encodes the families into one block of text.
func (f *snapshotFamilies) uncompressed(k encodingKey) (*encoding, error) {
	var raw bytes.Buffer
	series := 0
	for _, mf := range f.mfs {
		series += len(mf.Metric)
	}
	// About the length of a series of a large fleet, so that the buffer rarely grows.
	raw.Grow(128 * series)
	enc := k.encoder(&raw)
	ends := make([]int, len(f.mfs))
	for i, mf := range f.mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
		ends[i] = raw.Len()
	}
	text := raw.Bytes()
	if cap(text) > len(text)+len(text)/4 {
		text = bytes.Clone(text) // without much spare capacity
	}
	e := &encoding{segs: make([]segment, len(f.mfs))}
	start := 0
	for i, end := range ends {
		e.segs[i] = segment{data: text[start:end:end], size: int64(end - start)}
		start = end
	}
	return e, nil
}

// compressed encodes and compresses the families one at a time, so that the uncompressed text
// of only one family is in memory at once.
func (f *snapshotFamilies) compressed(k encodingKey) (*encoding, error) {
	var raw, z bytes.Buffer
	enc := k.encoder(&raw)
	// The fastest level: on a fleet's exposition it compresses about 6% less than the default
	// level (which promhttp uses) in half the time, and this runs at the first scrape after
	// every round.
	fw, err := flate.NewWriter(&z, flate.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("create the compressor: %w", err)
	}
	e := &encoding{segs: make([]segment, len(f.mfs))}
	ends := make([]int, len(f.mfs))
	for i, mf := range f.mfs {
		raw.Reset()
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
		fw.Reset(&z) // no reference to the previous family: segments are spliced independently
		if _, err := fw.Write(raw.Bytes()); err != nil {
			return nil, fmt.Errorf("compress %s: %w", mf.GetName(), err)
		}
		if err := fw.Flush(); err != nil {
			return nil, fmt.Errorf("compress %s: %w", mf.GetName(), err)
		}
		e.segs[i] = segment{crc: crc32.ChecksumIEEE(raw.Bytes()), size: int64(raw.Len())}
		ends[i] = z.Len()
	}
	data := bytes.Clone(z.Bytes()) // without the buffer's spare capacity
	start := 0
	for i, end := range ends {
		e.segs[i].data = data[start:end:end]
		start = end
	}
	return e, nil
}

// sink writes a response made of freshly encoded text (written to fresh) and cached segments,
// gzip-compressed or not. Compressed, the response is one gzip member: a header, the fresh
// parts compressed as they come and the cached ones copied, each ending on a sync flush, a
// final empty block, and the CRC-32 and size of the whole text.
type sink struct {
	w     io.Writer
	gzip  bool
	fresh bytes.Buffer
	fw    *flate.Writer
	crc   uint32
	size  int64
	err   error
}

// Fresh parts are small (the registry's own families), so the fastest level suffices; it also
// has the cheapest reset, which happens once per part.
var freshCompressors = sync.Pool{New: func() any {
	fw, _ := flate.NewWriter(io.Discard, flate.BestSpeed) // only an invalid level fails
	return fw
}}

// gzipHeader is a gzip member header: deflate, no flags, no modification time, unknown OS.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}

func newSink(w io.Writer, gzip bool) *sink {
	s := &sink{w: w, gzip: gzip}
	if gzip {
		s.fw = freshCompressors.Get().(*flate.Writer)
		_, s.err = w.Write(gzipHeader)
	}
	return s
}

func (s *sink) release() {
	if s.fw != nil {
		s.fw.Reset(io.Discard)
		freshCompressors.Put(s.fw)
		s.fw = nil
	}
}

// flushFresh sends the fresh text written so far; last ends the deflate stream.
func (s *sink) flushFresh(last bool) error {
	if s.err != nil {
		return s.err
	}
	p := s.fresh.Bytes()
	if !s.gzip {
		if len(p) > 0 {
			_, s.err = s.w.Write(p)
		}
		s.fresh.Reset()
		return s.err
	}
	if len(p) == 0 && !last {
		return nil
	}
	s.crc = crc32.Update(s.crc, crc32.IEEETable, p)
	s.size += int64(len(p))
	// A reset compressor refers to nothing before this part, which a cached segment may precede.
	s.fw.Reset(s.w)
	if _, s.err = s.fw.Write(p); s.err == nil {
		if last {
			s.err = s.fw.Close()
		} else {
			s.err = s.fw.Flush()
		}
	}
	s.fresh.Reset()
	return s.err
}

// cached sends a cached segment after the fresh text written so far.
func (s *sink) cached(seg segment) error {
	if s.flushFresh(false) != nil {
		return s.err
	}
	if _, s.err = s.w.Write(seg.data); s.err != nil {
		return s.err
	}
	if s.gzip {
		s.crc = crc32Combine(s.crc, seg.crc, seg.size)
		s.size += seg.size
	}
	return nil
}

// finish sends the rest of the fresh text and, compressed, ends the stream and the member.
func (s *sink) finish() error {
	if s.flushFresh(true) != nil || !s.gzip {
		return s.err
	}
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], s.crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(s.size)) // the size modulo 2^32, as gzip defines it
	_, s.err = s.w.Write(trailer[:])
	return s.err
}

// crc32Combine returns the CRC-32 (IEEE) of a text A followed by a text B from the CRC of A,
// the CRC of B and the length of B (zlib's crc32_combine): a cached segment's CRC is computed
// once, not over its text at every scrape.
func crc32Combine(crcA, crcB uint32, lenB int64) uint32 {
	return multModP(x2nModP(lenB, 3), crcA) ^ crcB
}

// multModP multiplies a and b modulo the CRC-32 polynomial (reflected); a must not be 0.
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crc32.IEEE
		} else {
			b >>= 1
		}
	}
}

// x2nTable[k] is x^(2^k) modulo the polynomial.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for n := 1; n < 32; n++ {
		p = multModP(p, p)
		t[n] = p
	}
	return t
}()

// x2nModP returns x^(n * 2^k) modulo the polynomial.
func x2nModP(n int64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for n != 0 {
		if n&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
		n >>= 1
		k++
	}
	return p
}
