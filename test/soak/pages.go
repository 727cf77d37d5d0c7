package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

// The mixin's alerts the soak's pages are judged for.
const (
	alertTargetDown      = "ProviderHealthTargetDown"
	alertProviderDown    = "ProviderHealthProviderDown"
	alertHostKeyMismatch = "ProviderHealthHostKeyMismatch"
	alertChecksStale     = "ProviderHealthChecksStale"
	alertChecksSlow      = "ProviderHealthChecksSlow"
	alertTargetFlapping  = "ProviderHealthTargetFlapping"
	alertFastBurn        = "ProviderHealthErrorBudgetFastBurn"
	alertSlowBurn        = "ProviderHealthErrorBudgetSlowBurn"
	alertFailingChecks   = "ProviderHealthTargetFailingChecks"
)

// stallKinds are the faults under which a target's checks make no contact or take the whole
// deadline: the mixin's ChecksStale and ChecksSlow are right to page while one holds.
var stallKinds = []string{"libvirtd-sigstop", "packets-dropped", "gce-slow"}

// span is a time a target's truth was down (a fault whose reasons are not Ready). The
// environment was changing from OuterFrom to InnerFrom (the fault being injected) and from
// InnerTo to OuterTo (being cleared, with its settle): the truth was surely down from InnerFrom
// to InnerTo, and at most from OuterFrom to OuterTo.
type span struct {
	Fault                                  string
	OuterFrom, InnerFrom, InnerTo, OuterTo time.Time
}

func (s span) inner() time.Duration { return s.InnerTo.Sub(s.InnerFrom) }

// Timing is what the windows of the pages are derived from: the runner's round, Prometheus's
// intervals and the mixin's scaled for: windows and route, all from the running configuration.
type Timing struct {
	// Interval and Timeout are the runner's; Scrape and Eval Prometheus's.
	Interval, Timeout, Scrape, Eval time.Duration
	// GroupWait and GroupInterval are the recommended route's.
	GroupWait, GroupInterval time.Duration
	// For is each judged alert's for: (absent: 0).
	For map[string]time.Duration
	// KeepFiringFor is each judged alert's keep_firing_for (absent: 0): it may fire, and
	// resolves, that much later than its condition holds.
	KeepFiringFor map[string]time.Duration
	// Severity is each judged alert's severity label.
	Severity map[string]string
	// Shadows maps a target of a provider with a failureThreshold above any fault's length
	// to the target whose faults it shares (the same host, checked by another provider):
	// it has no fault of its own, so no down page is allowed for it; the pages its shadow's
	// faults allow it are ChecksStale and ChecksSlow during a stall, and TargetFailingChecks.
	Shadows map[TargetKey]TargetKey
	// FlappingWindow and FlappingThreshold are ProviderHealthTargetFlapping's.
	FlappingWindow    time.Duration
	FlappingThreshold int
}

// Lag is the most time from a change in the environment to a rule evaluation that sees it: the
// first round that starts after the change (an interval) publishes its verdict (the deadline),
// the next scrape takes it, the next evaluation reads it.
func (t Timing) Lag() time.Duration { return t.Interval + t.Timeout + t.Scrape + t.Eval }

// Notify is the most time from an alert firing (or resolving) in Prometheus to its notification:
// Alertmanager flushes a new group after group_wait and a changed one at its next
// group_interval; one round more for the delivery and the machine's load.
func (t Timing) Notify() time.Duration { return max(t.GroupWait, t.GroupInterval) + t.Interval }

// Expect is a page the truth calls for (Must) or allows.
type Expect struct {
	Alert, Provider, Target, Severity string
	// Why names the fault (kind, target, when) the page is for.
	Why string
	// From and To bound when the page may fire.
	From, To time.Time
	Must     bool
	// FireBy is when a must page is late; ResolveBy when its resolution is (zero: not judged).
	FireBy, ResolveBy time.Time
	page              *Page
}

func (e *Expect) String() string {
	s := fmt.Sprintf("%s %s", strings.TrimPrefix(e.Alert, "ProviderHealth"), e.Provider)
	if e.Target != "" {
		s += "/" + e.Target
	}
	return fmt.Sprintf("%s (%s) for %s", s, e.Severity, e.Why)
}

// Page is one alert as the receiver got it: the first notification that holds it firing and
// the first that holds it resolved (zero when none came).
type Page struct {
	Alert, Provider, Target, Severity string
	StartsAt                          time.Time
	Fired, Resolved                   time.Time
}

func (p *Page) String() string {
	s := fmt.Sprintf("%s %s", strings.TrimPrefix(p.Alert, "ProviderHealth"), p.Provider)
	if p.Target != "" {
		s += "/" + p.Target
	}
	res := "never resolved"
	if !p.Resolved.IsZero() {
		res = "resolved " + clock(p.Resolved)
	}
	if p.Fired.IsZero() {
		return fmt.Sprintf("%s (%s) notified resolved only, %s (no page)", s, p.Severity, clock(p.Resolved))
	}
	return fmt.Sprintf("%s (%s) fired %s, %s", s, p.Severity, clock(p.Fired), res)
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// pageBook turns notifications, as they arrive, into pages.
type pageBook struct {
	pages map[string]*Page // by fingerprint and startsAt
	order []*Page
}

func newPageBook() *pageBook { return &pageBook{pages: map[string]*Page{}} }

// add records a notification received at at.
func (b *pageBook) add(n promstack.Notification, at time.Time) {
	for _, a := range n.Alerts {
		key := a.Fingerprint + "@" + a.StartsAt.String()
		p := b.pages[key]
		if p == nil {
			p = &Page{Alert: a.Labels["alertname"], Provider: a.Labels["provider"], Target: a.Labels["target"], Severity: a.Labels["severity"], StartsAt: a.StartsAt}
			b.pages[key] = p
			b.order = append(b.order, p)
		}
		switch {
		case a.Status == "firing" && p.Fired.IsZero():
			p.Fired = at
		case a.Status == "resolved" && p.Resolved.IsZero():
			p.Resolved = at
		}
	}
}

// firing lists the pages notified firing and not resolved yet.
func (b *pageBook) firing() []*Page {
	var out []*Page
	for _, p := range b.order {
		if !p.Fired.IsZero() && p.Resolved.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

// PageReport is the judgement of the notifications of a run.
type PageReport struct {
	Expected []*Expect
	Pages    []*Page
	// Missing: must pages that never came; Late: must pages that came after FireBy;
	// LateResolved: pages whose resolution came after ResolveBy, or never; Extra: pages the
	// truth does not allow (no fault calls for them, or a fault's page notified twice).
	Missing, Late, LateResolved []*Expect
	Extra                       []*Page
	// Must and Allowed count the must expectations and the pages the truth allowed but did
	// not require.
	Must, Allowed int
}

// expectations derives the pages the truth calls for and allows from every target's spans.
// targets lists each provider's targets; end is when the run stopped judging.
func expectations(t Timing, targets map[string][]string, spans map[TargetKey][]span) []*Expect {
	var out []*Expect
	lag, notify := t.Lag(), t.Notify()
	// add derives one expectation of an alert whose condition holds over s.
	add := func(alert, provider, target string, s span, must bool, why string) *Expect {
		f, keep := t.For[alert], t.KeepFiringFor[alert]
		e := &Expect{Alert: alert, Provider: provider, Target: target, Severity: t.Severity[alert], Why: why,
			From: s.OuterFrom, To: s.OuterTo.Add(lag + t.Eval + keep + notify)}
		// Must: even seen as late as the lag allows and ended as early as it can, the
		// condition holds for its for: and an evaluation.
		e.Must = must && s.inner() >= f+lag+t.Eval
		if e.Must {
			e.FireBy = s.InnerFrom.Add(lag + f + t.Eval + notify)
		}
		e.ResolveBy = s.OuterTo.Add(lag + t.Eval + keep + notify)
		out = append(out, e)
		return e
	}
	describe := func(k TargetKey, s span) string {
		return fmt.Sprintf("%s on %s %s-%s", s.Fault, k, clock(s.OuterFrom), clock(s.OuterTo))
	}
	providers := make([]string, 0, len(targets))
	for p := range targets {
		providers = append(providers, p)
	}
	sort.Strings(providers)
	for _, p := range providers {
		ts := targets[p]
		// The provider's outages: every target down at once.
		var whole []span
		for i, tg := range ts {
			s := spans[TargetKey{p, tg}]
			if i == 0 {
				whole = slices.Clone(s)
			} else {
				whole = intersect(whole, s)
			}
		}
		// An outage that begins before ProviderDown of the one before it surely resolved
		// (its keep_firing_for, seen as late as the lag allows) may be paged by that page,
		// which then resolves only after it: such outages form a run whose pages resolve by
		// the run's last ResolveBy, and only the run's first must page.
		slices.SortFunc(whole, func(a, b span) int { return a.OuterFrom.Compare(b.OuterFrom) })
		var run []*Expect
		for i, s := range whole {
			e := add(alertProviderDown, p, "", s, true, fmt.Sprintf("every target of %s down (%s) %s-%s", p, s.Fault, clock(s.OuterFrom), clock(s.OuterTo)))
			if i == 0 || s.OuterFrom.Sub(whole[i-1].OuterTo) >= t.KeepFiringFor[alertProviderDown]+lag+t.Eval {
				run = nil
			} else {
				e.Must, e.FireBy = false, time.Time{}
			}
			run = append(run, e)
			for _, r := range run {
				r.ResolveBy = e.ResolveBy
			}
		}
		var stall []span
		var first time.Time
		for _, tg := range ts {
			k := TargetKey{p, tg}
			for _, s := range spans[k] {
				if first.IsZero() || s.OuterFrom.Before(first) {
					first = s.OuterFrom
				}
				if slices.Contains(stallKinds, s.Fault) {
					stall = append(stall, s)
				}
				if s.Fault == "host-key-swapped" {
					add(alertHostKeyMismatch, p, tg, s, true, describe(k, s))
				}
				// A whole provider's outage pages ProviderDown only: a single target's
				// TargetDown is muted by it; a target whose outage meets one of the
				// provider's may or may not page before or after it.
				if len(ts) == 1 {
					continue
				}
				meets := slices.ContainsFunc(whole, func(w span) bool {
					return w.OuterFrom.Before(s.OuterTo.Add(lag)) && s.OuterFrom.Before(w.OuterTo.Add(lag))
				})
				add(alertTargetDown, p, tg, s, !meets, describe(k, s))
			}
			out = append(out, flapping(t, k, spans[k])...)
		}
		// Checks that hang or make no contact may read stale or slow while such a fault holds
		// anywhere in the provider (a held concurrency slot delays its neighbours too).
		for _, s := range stall {
			for _, tg := range ts {
				e := &Expect{Alert: alertChecksStale, Provider: p, Target: tg, Severity: t.Severity[alertChecksStale],
					Why: "a stall (" + s.Fault + ") in " + p, From: s.OuterFrom, To: s.OuterTo.Add(lag + t.Eval + notify)}
				out = append(out, e)
			}
			out = append(out, &Expect{Alert: alertChecksSlow, Provider: p, Severity: t.Severity[alertChecksSlow],
				Why: "a stall (" + s.Fault + ") in " + p, From: s.OuterFrom, To: s.OuterTo.Add(lag + t.Eval + notify)})
		}
		// The error budget burns from the provider's first outage on; when its alerts fire and
		// end is a function of the whole run's history, so they are allowed, not required.
		if !first.IsZero() {
			for _, a := range []string{alertFastBurn, alertSlowBurn} {
				out = append(out, &Expect{Alert: a, Provider: p, Severity: t.Severity[a], Why: "the budget " + p + "'s outages burned",
					From: first, To: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)})
			}
		}
	}
	for k, shadow := range t.Shadows {
		for _, s := range spans[shadow] {
			why := fmt.Sprintf("%s on %s %s-%s, below %s's failureThreshold", s.Fault, shadow, clock(s.OuterFrom), clock(s.OuterTo), k.Provider)
			if slices.Contains(stallKinds, s.Fault) {
				out = append(out,
					&Expect{Alert: alertChecksStale, Provider: k.Provider, Target: k.Target, Severity: t.Severity[alertChecksStale], Why: why, From: s.OuterFrom, To: s.OuterTo.Add(lag + t.Eval + notify)},
					&Expect{Alert: alertChecksSlow, Provider: k.Provider, Severity: t.Severity[alertChecksSlow], Why: why, From: s.OuterFrom, To: s.OuterTo.Add(lag + t.Eval + notify)})
			}
		}
		// Its raw checks fail while its verdict holds: what TargetFailingChecks is for. When
		// it fires and ends depends on the run's history: allowed from the first fault on.
		if ss := spans[shadow]; len(ss) > 0 {
			out = append(out, &Expect{Alert: alertFailingChecks, Provider: k.Provider, Target: k.Target, Severity: t.Severity[alertFailingChecks],
				Why: "the checks " + shadow.String() + "'s faults failed", From: ss[0].OuterFrom, To: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)})
		}
	}
	return out
}

// flapping allows TargetFlapping where the truth itself flips more than the threshold within
// the window (widened by the lag at both ends).
func flapping(t Timing, k TargetKey, spans []span) []*Expect {
	var edges []time.Time
	for _, s := range spans {
		edges = append(edges, s.OuterFrom, s.OuterTo)
	}
	var out []*Expect
	w := t.FlappingWindow + 2*t.Lag()
	for i := range edges {
		j := i
		for j+1 < len(edges) && edges[j+1].Sub(edges[i]) <= w {
			j++
		}
		if j-i+1 > t.FlappingThreshold {
			out = append(out, &Expect{Alert: alertTargetFlapping, Provider: k.Provider, Target: k.Target, Severity: t.Severity[alertTargetFlapping],
				Why: fmt.Sprintf("%d changes of %s's truth within %s", j-i+1, k, w), From: edges[i], To: edges[j].Add(w + t.Notify())})
		}
	}
	return out
}

// intersect returns the spans when both a and b are down.
func intersect(a, b []span) []span {
	var out []span
	for _, x := range a {
		for _, y := range b {
			s := span{
				Fault:     x.Fault + "+" + y.Fault,
				OuterFrom: later(x.OuterFrom, y.OuterFrom), OuterTo: earlier(x.OuterTo, y.OuterTo),
				InnerFrom: later(x.InnerFrom, y.InnerFrom), InnerTo: earlier(x.InnerTo, y.InnerTo),
			}
			if !s.OuterFrom.Before(s.OuterTo) {
				continue
			}
			if s.InnerTo.Before(s.InnerFrom) {
				s.InnerTo = s.InnerFrom
			}
			out = append(out, s)
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// judgePages matches every page with an expectation of its alert, labels and severity whose
// window holds its firing; a page that matches none is extra. A page notified only resolved
// (Alertmanager lists an alert that fired while inhibited, or between two flushes of its
// group, as resolved in its group's next notification) is no page.
func judgePages(t Timing, expected []*Expect, pages []*Page) *PageReport {
	forOf, eval := t.For, t.Eval
	r := &PageReport{Expected: expected, Pages: pages}
	for _, e := range expected {
		e.page = nil
	}
	for _, p := range pages {
		if p.Fired.IsZero() {
			continue // resolved only: its firing was notified before the book began
		}
		// The page is for the latest span that began at least its for: before it fired (an
		// evaluation's tolerance) and whose window still holds the firing: a page that fires
		// shortly after one fault cleared and another began is the new fault's.
		var best *Expect
		for _, e := range expected {
			if e.page != nil || e.Alert != p.Alert || e.Provider != p.Provider || e.Target != p.Target || e.Severity != p.Severity ||
				p.Fired.Before(e.From.Add(forOf[e.Alert]-eval)) || p.Fired.After(e.To) {
				continue
			}
			if best == nil || e.From.After(best.From) {
				best = e
			}
		}
		if best == nil {
			r.Extra = append(r.Extra, p)
			continue
		}
		// Budget alerts, and TargetFailingChecks of a target whose checks fail below its
		// threshold, stay allowed for every later page: they may fire and end many times.
		if best.Alert != alertFastBurn && best.Alert != alertSlowBurn && best.Alert != alertFailingChecks {
			best.page = p
		}
		if !best.Must {
			r.Allowed++
		}
		if !best.ResolveBy.IsZero() && (p.Resolved.IsZero() || p.Resolved.After(best.ResolveBy)) {
			r.LateResolved = append(r.LateResolved, best)
		}
	}
	for _, e := range expected {
		if !e.Must {
			continue
		}
		r.Must++
		switch {
		case e.page == nil:
			r.Missing = append(r.Missing, e)
		case e.page.Fired.After(e.FireBy):
			r.Late = append(r.Late, e)
		}
	}
	return r
}

// spans reads the down spans of every target from the judge's changes; a fault still held at
// end ends there.
func (j *judge) spans(end time.Time) map[TargetKey][]span {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[TargetKey][]span{}
	for k, cs := range j.changes {
		for i, c := range cs {
			if c.begin.IsZero() || slices.Contains(c.truth.Reasons, checks.ReasonReady) {
				continue
			}
			s := span{Fault: c.truth.Fault, OuterFrom: c.begin, InnerFrom: c.end, InnerTo: end, OuterTo: end}
			if s.InnerFrom.IsZero() {
				s.InnerFrom = end
			}
			if i+1 < len(cs) {
				s.InnerTo = cs[i+1].begin
				if !cs[i+1].end.IsZero() {
					s.OuterTo = cs[i+1].end
				}
			}
			out[k] = append(out[k], s)
		}
	}
	return out
}
