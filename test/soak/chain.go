package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/collector"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/chain"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

// chainRun is the rest of the chain, from the runner's snapshots on: its metrics served as
// the exporter serves them, a Prometheus with the mixin's rules, an Alertmanager with its
// inhibit rules and recommended route, the webhook receiver, and the ProviderHealth writer on
// the soak's API server; with what it saw: the pages and the objects.
type chainRun struct {
	mixin  *chain.Mixin
	stack  *promstack.Stack
	timing Timing
	// crdGrace is how long an object may disagree with the truth: the verdict's round, one
	// round of grace, and the writer's interval.
	crdGrace time.Duration

	mu   sync.Mutex
	book *pageBook
	objs []objectSeen
}

// objectSeen is one target of a ProviderHealth object as read at At.
type objectSeen struct {
	At     time.Time
	Target TargetKey
	Up     bool
	Reason checks.Reason
}

// writerInterval is the writer's MinReasonInterval and MaxRetryBackoff in the soak: a round.
func (o Options) writerInterval() time.Duration { return o.Interval }

// startChain starts the chain behind runner r; every part is stopped in tb's cleanup or
// when ctx ends (bg waits for its goroutines).
func (e *env) startChain(tb testing.TB, ctx context.Context, bg *sync.WaitGroup, r *checks.Runner, logf func(string, ...any)) *chainRun {
	tb.Helper()
	o := e.opts
	c := &chainRun{book: newPageBook()}

	// The runner's metrics as the exporter serves them: the snapshot's families beside a
	// registry holding the interval and timeout the mixin's ChecksStale and ChecksSlow read.
	reg := prometheus.NewRegistry()
	interval := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: checks.MetricNamespace, Name: "provider_check_interval_seconds", Help: "The interval between two rounds of checks."})
	timeout := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: checks.MetricNamespace, Name: "provider_check_timeout_seconds", Help: "The deadline of one round of checks."})
	interval.Set(o.Interval.Seconds())
	timeout.Set(o.Timeout.Seconds())
	reg.MustRegister(interval, timeout)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(collector.NewGatherer(r.Current).With(reg), promhttp.HandlerOpts{EnableOpenMetrics: true}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("soak: listen for the metrics: %v", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	bg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("soak: metrics server: %v", err)
		}
	})
	context.AfterFunc(ctx, func() { _ = srv.Close() })

	c.mixin = chain.Render(tb, o.Scale)
	c.stack = promstack.Start(tb, c.mixin.StackOptions([]string{ln.Addr().String()}, c.mixin.WriteRuleFiles(tb, tb.TempDir(), 0)))
	m := c.mixin
	c.timing = Timing{
		Interval: o.Interval, Timeout: o.Timeout, Scrape: m.Interval(), Eval: m.Interval(),
		GroupWait: m.GroupWait, GroupInterval: m.GroupInterval,
		For: map[string]time.Duration{
			alertTargetDown: m.TargetDownFor, alertProviderDown: m.ProviderDownFor,
			alertHostKeyMismatch: m.Duration(tb, "hostKeyMismatchFor"),
		},
		KeepFiringFor: map[string]time.Duration{alertProviderDown: m.Duration(tb, "providerDownKeepFiringFor")},
		Severity: map[string]string{
			alertTargetDown: m.Severity(tb, "targetDown"), alertProviderDown: m.Severity(tb, "providerDown"),
			alertHostKeyMismatch: m.Severity(tb, "hostKeyMismatch"), alertChecksStale: m.Severity(tb, "checksStale"),
			alertChecksSlow: m.Severity(tb, "checksSlow"), alertTargetFlapping: m.Severity(tb, "targetFlapping"),
			alertFailingChecks: m.Severity(tb, "targetFailingChecks"),
		},
		FlappingWindow: m.Duration(tb, "flappingWindow"),
	}
	burn, _ := m.Config["availabilityBurnRates"].(map[string]any)
	for alert, key := range map[string]string{alertFastBurn: "fast", alertSlowBurn: "slow"} {
		b, _ := burn[key].(map[string]any)
		sev, _ := b["severity"].(string)
		c.timing.Severity[alert] = sev
	}
	th, _ := m.Config["flappingThreshold"].(float64)
	c.timing.FlappingThreshold = int(th)
	c.crdGrace = 2*o.Interval + o.Timeout + o.writerInterval()
	logf("soak: chain: Prometheus scrapes and evaluates every %s; a page's lag is at most %s to the rule and %s to the receiver; an object may lag %s",
		m.Interval(), c.timing.Lag(), c.timing.Notify(), c.crdGrace)

	// The writer, as the exporter runs it, on the API server the kubernetes provider checks.
	root, err := chain.Root()
	if err != nil {
		tb.Fatal(err)
	}
	e.kube.ApplyCRDFile(tb, filepath.Join(root, "deploy", "crd", "providerhealth.io_providerhealths.yaml"))
	w, err := crdwriter.New(crdwriter.Options{
		Config: e.kube.AdminConfig, Source: r, Interval: o.Interval,
		Logger:            slog.New(slog.NewTextHandler(&lineWriter{logf: logf, prefix: "crdwriter: "}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MinReasonInterval: o.writerInterval(), MaxRetryBackoff: o.writerInterval(),
	})
	if err != nil {
		tb.Fatalf("soak: the ProviderHealth writer: %v", err)
	}
	bg.Go(func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			logf("soak: the ProviderHealth writer stopped: %v", err)
		}
	})

	// The receiver's notifications, timed as they arrive.
	bg.Go(func() {
		seen := 0
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ns := c.stack.Notifications()
			now := time.Now()
			c.mu.Lock()
			for _, n := range ns[seen:] {
				c.book.add(n, now)
			}
			c.mu.Unlock()
			seen = len(ns)
		}
	})

	// The objects, read four times a round (nothing is read while the API server is down).
	dyn, err := dynamic.NewForConfig(e.kube.AdminConfig)
	if err != nil {
		tb.Fatal(err)
	}
	gvr := v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource)
	bg.Go(func() {
		tick := time.NewTicker(o.Interval / 4)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(ctx, o.Interval)
			list, err := dyn.Resource(gvr).List(rctx, metav1.ListOptions{})
			cancel()
			now := time.Now()
			if err != nil {
				continue
			}
			var seen []objectSeen
			for _, u := range list.Items {
				var ph v1alpha1.ProviderHealth
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &ph); err != nil {
					logf("soak: undecodable ProviderHealth %s: %v", u.GetName(), err)
					continue
				}
				for _, ts := range ph.Status.Targets {
					seen = append(seen, objectSeen{At: now, Target: TargetKey{ph.Name, ts.Name}, Up: ts.Up, Reason: checks.Reason(ts.Reason)})
				}
			}
			c.mu.Lock()
			c.objs = append(c.objs, seen...)
			c.mu.Unlock()
		}
	})
	return c
}

// waitReady waits until Prometheus has every target up and the writer has an object for every
// provider reading every target Ready.
func (c *chainRun) waitReady(tb testing.TB, all []TargetKey, timeout time.Duration) {
	tb.Helper()
	c.stack.WaitForQuery(tb, `count(proxy_operator_provider_target_up == 1)`, func(s []promstack.Sample) bool {
		return len(s) == 1 && int(s[0].Value) == len(all)
	}, timeout)
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		ready := map[TargetKey]bool{}
		for _, s := range c.objs {
			ready[s.Target] = s.Up
		}
		c.mu.Unlock()
		n := 0
		for _, k := range all {
			if ready[k] {
				n++
			}
		}
		if n == len(all) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("soak: the ProviderHealth objects read %d of %d targets Ready %s after the start", n, len(all), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitQuiet waits until no page that must resolve is still firing, at most bound.
func (c *chainRun) waitQuiet(bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		firing := slices.ContainsFunc(c.book.firing(), func(p *Page) bool {
			return p.Alert == alertTargetDown || p.Alert == alertProviderDown || p.Alert == alertHostKeyMismatch
		})
		c.mu.Unlock()
		if !firing {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ObjectEpisode is a ProviderHealth object's target disagreeing with the truth for longer than
// the grace, over consecutive reads.
type ObjectEpisode struct {
	Target      TargetKey
	Got         checks.Reason
	Expected    []checks.Reason
	First, Last time.Time
	Reads       int
}

func (e ObjectEpisode) String() string {
	return fmt.Sprintf("%s: the object read %s, the truth %s, %s-%s (%d reads)", e.Target, e.Got, reasonList(e.Expected), clock(e.First), clock(e.Last), e.Reads)
}

// judgeObjects compares every read of the objects with the truth: a read agrees when its reason
// is one of a truth in effect at some time within the grace before it. Reads within the
// grace after the API server came back (the writer could not write while it was down) and
// reads while a wrong verdict of the same target was in force (the object mirrors it
// faithfully; the verdict is counted as such) are not held against the writer.
func (j *judge) judgeObjects(objs []objectSeen, grace time.Duration, apiDown []span, wrong []Episode) []ObjectEpisode {
	j.mu.Lock()
	defer j.mu.Unlock()
	open := map[TargetKey]*ObjectEpisode{}
	var out []*ObjectEpisode
	closeEp := func(k TargetKey) {
		delete(open, k)
	}
	for _, s := range objs {
		k := s.Target
		if slices.ContainsFunc(apiDown, func(d span) bool { return !s.At.Before(d.OuterFrom) && s.At.Before(d.OuterTo.Add(grace)) }) ||
			slices.ContainsFunc(wrong, func(e Episode) bool {
				return e.Target == k && !s.At.Before(e.Since) && s.At.Before(e.Last.Add(grace))
			}) {
			closeEp(k)
			continue
		}
		cs := j.changes[k]
		from := s.At.Add(-grace)
		var allowed []checks.Reason
		for i, c := range cs {
			if !c.begin.IsZero() && c.begin.After(s.At) {
				break
			}
			// c holds from its begin until the next change ends.
			if i+1 < len(cs) && !cs[i+1].begin.After(s.At) && !cs[i+1].end.IsZero() && cs[i+1].end.Before(from) {
				continue
			}
			allowed = append(allowed, c.truth.Reasons...)
		}
		if len(allowed) == 0 || slices.Contains(allowed, s.Reason) {
			closeEp(k)
			continue
		}
		if e := open[k]; e != nil && e.Got == s.Reason {
			e.Last = s.At
			e.Reads++
			continue
		}
		e := &ObjectEpisode{Target: k, Got: s.Reason, Expected: slices.Compact(sortedReasons(allowed)), First: s.At, Last: s.At, Reads: 1}
		open[k] = e
		out = append(out, e)
	}
	res := make([]ObjectEpisode, len(out))
	for i, e := range out {
		res[i] = *e
	}
	return res
}

func sortedReasons(rs []checks.Reason) []checks.Reason {
	out := slices.Clone(rs)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ChainReport is the chain's part of a Report.
type ChainReport struct {
	Pages *PageReport
	// Objects lists the objects' disagreements with the truth beyond the grace.
	Objects    []ObjectEpisode
	ObjectRead int
}

// Summary is one line of counts.
func (c *ChainReport) Summary() string {
	p := c.Pages
	fired := 0
	for _, pg := range p.Pages {
		if !pg.Fired.IsZero() {
			fired++
		}
	}
	return fmt.Sprintf("%d pages notified (%d required, %d more allowed; %d alerts more notified only resolved): %d missing, %d extra, %d late, %d late resolutions; %d object reads, %d disagreeing with the truth beyond the grace",
		fired, p.Must, p.Allowed, len(p.Pages)-fired, len(p.Missing), len(p.Extra), len(p.Late), len(p.LateResolved), c.ObjectRead, len(c.Objects))
}

// Failures lists one line per miss.
func (c *ChainReport) Failures() []string {
	var out []string
	for _, e := range c.Pages.Missing {
		out = append(out, fmt.Sprintf("MISSING %s: no page by %s", e, clock(e.FireBy)))
	}
	for _, e := range c.Pages.Late {
		out = append(out, fmt.Sprintf("LATE %s: fired %s, due by %s", e, clock(e.page.Fired), clock(e.FireBy)))
	}
	for _, e := range c.Pages.LateResolved {
		got := "never"
		if e.page != nil && !e.page.Resolved.IsZero() {
			got = clock(e.page.Resolved)
		}
		out = append(out, fmt.Sprintf("LATE RESOLUTION %s: resolved %s, due by %s", e, got, clock(e.ResolveBy)))
	}
	for _, p := range c.Pages.Extra {
		out = append(out, fmt.Sprintf("EXTRA %s: no fault calls for it", p))
	}
	for _, o := range c.Objects {
		out = append(out, "OBJECT "+o.String())
	}
	return out
}

// finish judges what the chain saw once the run is over.
func (c *chainRun) finish(j *judge, targets map[string][]string, end time.Time, wrong []Episode) *ChainReport {
	spans := j.spans(end)
	var apiDown []span
	for k, ss := range spans {
		if k.Provider == kubeProvider {
			for _, s := range ss {
				if s.Fault == "apiserver-stopped" {
					apiDown = append(apiDown, s)
				}
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp := expectations(c.timing, targets, spans)
	rep := &ChainReport{Pages: judgePages(c.timing, exp, c.book.order), ObjectRead: len(c.objs)}
	rep.Objects = j.judgeObjects(c.objs, c.crdGrace, apiDown, wrong)
	return rep
}
