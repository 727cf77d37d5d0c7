package exporter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

const (
	// probeTimeoutMargin is taken off Prometheus's scrape timeout (the
	// X-Prometheus-Scrape-Timeout-Seconds header) so that the answer, a timeout verdict
	// included, reaches Prometheus before it gives up; at most a quarter of the timeout.
	probeTimeoutMargin = 500 * time.Millisecond
	// scrapeTimeoutHeader is the header in which Prometheus sends its scrape timeout.
	scrapeTimeoutHeader = "X-Prometheus-Scrape-Timeout-Seconds"
	// maxTargetsNamed bounds how many targets an "unknown target" answer lists.
	maxTargetsNamed = 20
)

// probeHandler serves GET /probe?provider=P&target=T: one check of one target now, answered in
// the Prometheus text format (probe_success, probe_duration_seconds, probe_reason), or with
// &debug=true as a plain-text trace of its stages. It goes through the provider's own checker
// (checks.TargetProber), so a KVM host is reached over its pooled connection, and it never
// touches the runner: the snapshot, /metrics and the ProviderHealth objects do not change.
//
// Each provider has its own bound on the probes running at once, sized from what the provider
// can take (checks.ProbeLimitOf: a kvm provider's concurrency, a few for an API provider), so
// that probes of one provider never queue behind another's. A probe that waited for a place
// is not charged for the wait: when its check then runs out the deadline, the answer is an
// HTTP error (no verdict), never a Timeout the target did not earn.
type probeHandler struct {
	e *Exporter
	// limit, when positive, replaces every provider's own bound (tests).
	limit int

	mu sync.Mutex
	// places holds, per checker with a probe running or waiting, the channel with one token
	// per running probe of its provider. A reload's new checker gets its own.
	places map[checks.Checker]*probePlaces
	// flights are the checks running for probes, one per target (probeshare.go).
	flights map[probeKey]*probeFlight
	// answers are the finished checks whose verdict still serves the probes of their target
	// (for --web.probe-min-interval after their end).
	answers map[probeKey]*probeFlight
}

type probePlaces struct {
	ch    chan struct{}
	users int
}

// newProbeHandler returns the handler; limit, when positive, bounds every provider's probes in
// flight instead of its own limit.
func newProbeHandler(e *Exporter, limit int) *probeHandler {
	return &probeHandler{e: e, limit: limit, places: map[checks.Checker]*probePlaces{},
		flights: map[probeKey]*probeFlight{}, answers: map[probeKey]*probeFlight{}}
}

// badRequest answers 400 with what is wrong.
func badRequest(w http.ResponseWriter, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, format+"\n", args...)
}

// probeDeadline is the probe's timeout and how it was decided, for the trace.
type probeDeadline struct {
	timeout time.Duration
	why     string
}

// MaxDerivedTimeout caps the round timeout derived when --provider-check-timeout is 0, and
// caps a probe's timeout when checks are off.
const MaxDerivedTimeout = 15 * time.Second

// probeTimeout decides the probe's timeout from the scrape timeout header (less the margin) and
// the timeout= parameter, the shorter of both when both are given, capped by the round timeout
// (the derived default when checks are off). The header is never a reason to refuse a probe or
// to fail a target: a value that is not a positive number of seconds (garbage, 0, negative,
// NaN) is ignored, one beyond the cap (1e300, +Inf) is the cap, and the deadline it sets is at
// least minProbeTimeout.
func (e *Exporter) probeTimeout(r *http.Request) (probeDeadline, error) {
	capAt, capName := e.probeCap()
	var d probeDeadline
	var whys, notes []string
	if h := r.Header.Get(scrapeTimeoutHeader); h != "" {
		if t, why, ok := scrapeTimeout(h, capAt); ok {
			d.timeout = t
			whys = append(whys, why)
		} else {
			notes = append(notes, why)
		}
	}
	if p := r.URL.Query().Get("timeout"); p != "" || r.URL.Query().Has("timeout") {
		t, err := parseProbeTimeout(p)
		if err != nil {
			return d, err
		}
		if d.timeout == 0 || t < d.timeout {
			d.timeout = t
		}
		whys = append(whys, "timeout="+quoteShort(p))
	}
	switch {
	case d.timeout == 0:
		d.timeout, d.why = capAt, capName
	case d.timeout > capAt:
		d.timeout, d.why = capAt, strings.Join(whys, ", ")+", capped by "+capName+" "+capAt.String()
	default:
		d.why = strings.Join(whys, ", ")
	}
	if len(notes) > 0 {
		d.why += "; " + strings.Join(notes, "; ")
	}
	return d, nil
}

// minProbeTimeout is the shortest deadline the scrape timeout header sets: a shorter one (a
// scraper's mistake, or 1e-300) would make a healthy target read Timeout. A scraper that
// gives up sooner sees no answer, which reads up 0, never a verdict.
const minProbeTimeout = 100 * time.Millisecond

// scrapeTimeout reads the header's value: the deadline it sets (less the margin, at least
// minProbeTimeout, and above capAt when the value is), and why; ok is false when the value is
// not a positive number of seconds, and why then says it is ignored.
func scrapeTimeout(h string, capAt time.Duration) (t time.Duration, why string, ok bool) {
	secs, err := strconv.ParseFloat(strings.TrimSpace(h), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(secs) || secs <= 0 {
		return 0, fmt.Sprintf("header %s %s ignored (not a positive number of seconds)", scrapeTimeoutHeader, quoteShort(h)), false
	}
	// Anything beyond the cap is the cap: clamp before converting, since a float past
	// 292 years (1e300, +Inf) does not fit a time.Duration.
	secs = min(secs, capAt.Seconds()+1)
	t = time.Duration(secs * float64(time.Second))
	margin := min(probeTimeoutMargin, t/4)
	t -= margin
	why = fmt.Sprintf("%s %s less a margin of %s", scrapeTimeoutHeader, quoteShort(h), margin)
	if floor := min(minProbeTimeout, capAt); t < floor {
		t = floor
		why += fmt.Sprintf(", raised to the least deadline %s", floor)
	}
	return t, why, true
}

// quoteShort renders a request's value for a message: as it is when it is short and plain,
// else quoted and cut, so that a header of a megabyte does not make an answer of one.
func quoteShort(s string) string {
	const most = 40
	plain := len(s) <= most && strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r > '~' || r == '"' }) < 0
	if plain && s != "" {
		return s
	}
	if len(s) > most {
		return strconv.Quote(strings.ToValidUTF8(s[:most], "")) + fmt.Sprintf(" (cut, %d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// parseProbeTimeout reads the timeout= parameter: a Go duration (2s, 1500ms) or a number of
// seconds (2, 1.5), positive. A number past what a time.Duration holds is the longest one (the
// cap applies).
func parseProbeTimeout(s string) (time.Duration, error) {
	bad := fmt.Errorf("parameter timeout=%s: want a positive duration (examples: 2s, 1500ms) or number of seconds (2, 1.5)", strconv.Quote(cut(s, 40)))
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil && !errors.Is(ferr, strconv.ErrRange) || math.IsNaN(secs) || secs <= 0 {
			return 0, bad
		}
		if secs >= (math.MaxInt64 / float64(time.Second)) {
			return math.MaxInt64, nil
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, bad
	}
	return d, nil
}

// cut returns at most n bytes of s, whole runes.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// lookup returns the checker of a provider, or the names of the configured ones; closed is
// true once the exporter has closed its checkers (shutting down).
func (e *Exporter) lookup(provider string) (c checks.Checker, names []string, closed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, nil, true
	}
	if en, ok := e.entries[provider]; ok {
		return en.checker, nil, false
	}
	names = make([]string, 0, len(e.entries))
	for name := range e.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return nil, names, false
}

// targetLabels returns a target's labels from the providers file (its provider's, its own over
// them), as the runner sees them.
func (e *Exporter) targetLabels(provider, target string) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	en, ok := e.entries[provider]
	if !ok {
		return nil
	}
	return en.labels().Of(target)
}

// quoteList renders names for a message, at most maxTargetsNamed of them.
func quoteList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, 0, min(len(names), maxTargetsNamed))
	for _, n := range names[:min(len(names), maxTargetsNamed)] {
		q = append(q, strconv.Quote(n))
	}
	s := strings.Join(q, ", ")
	if len(names) > maxTargetsNamed {
		s += fmt.Sprintf(" and %d more", len(names)-maxTargetsNamed)
	}
	return s
}

// probeRequest is what a /probe request asks.
type probeRequest struct {
	provider, target string
	debug            bool
	deadline         probeDeadline
}

// parseProbeRequest reads a /probe request's parameters and headers; the error says what is
// wrong, for a 400, quoting at most a few dozen bytes of what was sent.
func (e *Exporter) parseProbeRequest(r *http.Request) (probeRequest, error) {
	q := r.URL.Query()
	pr := probeRequest{provider: q.Get("provider"), target: q.Get("target")}
	var missing []string
	if pr.provider == "" {
		missing = append(missing, "provider")
	}
	if pr.target == "" {
		missing = append(missing, "target")
	}
	if len(missing) > 0 {
		return pr, fmt.Errorf("missing parameter %s: want /probe?provider=NAME&target=NAME (optional: &timeout=DURATION, &debug=true)",
			strings.Join(missing, " and "))
	}
	if v := q.Get("debug"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return pr, fmt.Errorf("parameter debug=%s: want true or false", strconv.Quote(cut(v, 40)))
		}
		pr.debug = b
	}
	var err error
	pr.deadline, err = e.probeTimeout(r)
	return pr, err
}

func (h *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pr, err := h.e.parseProbeRequest(r)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	provider, target, debug, deadline := pr.provider, pr.target, pr.debug, pr.deadline
	c, known, closed := h.e.lookup(provider)
	if closed {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "the exporter is shutting down")
		return
	}
	if c == nil {
		badRequest(w, "unknown provider %s (configured providers: %s)", strconv.Quote(cut(provider, 100)), quoteList(known))
		return
	}
	targets := c.Targets()
	if !slices.Contains(targets, target) {
		badRequest(w, "unknown target %s of provider %q (its targets: %s)", strconv.Quote(cut(target, 100)), provider, quoteList(targets))
		return
	}
	prober, ok := c.(checks.TargetProber)
	if !ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotImplemented)
		fmt.Fprintf(w, "provider %q (type %s) cannot be probed on demand\n", provider, c.Type())
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), deadline.timeout)
	defer cancel()
	start := time.Now()
	a := h.probe(ctx, c, prober, target)
	res, err, trace := a.res, a.err, a.trace
	elapsed := time.Since(start)
	if err == nil {
		// The operator's maintenance, as the rounds publish it.
		res, _ = checks.OperatorMaintenance(res, h.e.targetLabels(provider, target), time.Now())
	}
	h.e.logger.Debug("probe", "provider", provider, "target", target, "reason", string(res.Reason),
		"duration", elapsed, "err", err)

	if debug {
		h.writeTrace(w, c, target, deadline, trace, a.how, res, elapsed, err)
		return
	}
	if err != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(statusOf(err))
		if res.Message != "" {
			err = fmt.Errorf("%w (%s)", err, res.Message)
		}
		fmt.Fprintf(w, "probe of target %q of provider %q: %v\n", target, provider, err)
		return
	}
	h.writeMetrics(w, r, res, elapsed)
}

// errProbeWait is the error of a probe that waited for its turn until its deadline.
type errProbeWait struct{ msg string }

func (e *errProbeWait) Error() string { return e.msg }

// statusOf is the HTTP status of a probe that gave no verdict: 503 when it found the target
// or the exporter busy (retry later), 400 for a target a reload removed meanwhile, 500
// otherwise.
func statusOf(err error) int {
	var pw *errProbeWait
	switch {
	case errors.As(err, &pw) || errors.Is(err, checks.ErrBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, checks.ErrUnknownTarget):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// placesOf returns the bound on c's probes in flight.
func (h *probeHandler) placesOf(c checks.Checker) int {
	if h.limit > 0 {
		return h.limit
	}
	return checks.ProbeLimitOf(c)
}

// run is a shared check (probeshare.go): it waits for a place among the provider's probes in
// flight within ctx, marks when the check starts, then probes. An error means no verdict about
// the target: the wait ran out the deadline, or the check ran it out after a wait (the time
// queued is not the target's to lose).
func (h *probeHandler) run(ctx context.Context, f *probeFlight, c checks.Checker, p checks.TargetProber, target string) (checks.TargetResult, error) {
	trace := f.trace
	h.mu.Lock()
	pl := h.places[c]
	if pl == nil {
		pl = &probePlaces{ch: make(chan struct{}, h.placesOf(c))}
		h.places[c] = pl
	}
	pl.users++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if pl.users--; pl.users == 0 {
			delete(h.places, c)
		}
		h.mu.Unlock()
	}()

	var (
		queued time.Duration
		waited bool
	)
	select {
	case pl.ch <- struct{}{}:
	default:
		// The uncontended take never waits, so a probe that did not wait has its whole deadline.
		start := time.Now()
		end := trace.Begin("wait for a place among the provider's probes in flight")
		select {
		case pl.ch <- struct{}{}:
			queued, waited = time.Since(start), true
			end("ok")
		case <-ctx.Done():
			err := &errProbeWait{fmt.Sprintf("%d probes of provider %q were still running at the deadline (at most %d at once)",
				cap(pl.ch), c.Name(), cap(pl.ch))}
			end(err.Error())
			return checks.TargetResult{}, err
		}
	}
	defer func() { <-pl.ch }()
	h.mu.Lock()
	f.checkStart, f.queued = time.Now(), waited
	h.mu.Unlock()
	res, err := p.ProbeTarget(ctx, target, trace)
	if err == nil && waited && ctx.Err() != nil && res.Reason != checks.ReasonReady {
		return res, &errProbeWait{fmt.Sprintf("the check ran out the probe's deadline after waiting %s for a place among the probes of provider %q in flight (at most %d at once): the verdict would not be the target's",
			queued.Round(time.Millisecond), c.Name(), cap(pl.ch))}
	}
	return res, err
}

// writeMetrics answers the verdict in the Prometheus exposition format, negotiated by promhttp
// as on /metrics.
func (h *probeHandler) writeMetrics(w http.ResponseWriter, r *http.Request, res checks.TargetResult, elapsed time.Duration) {
	reg := prometheus.NewRegistry()
	success := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "probe_success",
		Help: "Whether the target's verdict is Ready (1) or not (0).",
	})
	duration := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "probe_duration_seconds",
		Help: "How long the probe took, waits for the target's turn included.",
	})
	reason := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "probe_reason",
		Help: "The verdict's reason (docs/reasons.md): 1 for the current reason only.",
	}, []string{"reason"})
	reg.MustRegister(success, duration, reason)
	if res.Up {
		success.Set(1)
	}
	duration.Set(elapsed.Seconds())
	reason.WithLabelValues(string(res.Reason)).Set(1)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: promhttpLogger{h.e}}).ServeHTTP(w, r)
}

// writeTrace answers the plain-text trace of &debug=true.
func (h *probeHandler) writeTrace(w http.ResponseWriter, c checks.Checker, target string, d probeDeadline,
	trace *checks.Trace, how string, res checks.TargetResult, elapsed time.Duration, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(statusOf(err))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "probe of target %q of provider %q (type %s)\n", target, c.Name(), c.Type())
	fmt.Fprintf(&b, "deadline: %s (%s)\n", d.timeout, d.why)
	fmt.Fprintf(&b, "answer: %s\n\n", how)
	b.WriteString("stages (start offset, duration, stage, result):\n")
	if s := trace.String(); s != "" {
		b.WriteString(s)
	} else {
		b.WriteString("(none)\n")
	}
	b.WriteString("\n")
	if err != nil {
		fmt.Fprintf(&b, "no verdict after %s: %v\n", elapsed.Round(time.Millisecond), err)
	} else {
		state := "down"
		if res.Up {
			state = "up"
		}
		fmt.Fprintf(&b, "verdict: %s (%s) after %s\n", res.Reason, state, elapsed.Round(time.Millisecond))
		fmt.Fprintf(&b, "message: %s\n", res.Message)
		success := 0
		if res.Up {
			success = 1
		}
		fmt.Fprintf(&b, "probe_success %d\n", success)
	}
	b.WriteString("\nThis probe did not change the exporter's cached verdicts (/metrics, the status page, ProviderHealth).\n")
	_, _ = w.Write([]byte(b.String()))
}
