// Package collector serves the runner's current checks.Snapshot as Prometheus metrics. A scrape
// never runs a check and never waits for a round: it reads the newest immutable snapshot, so it
// returns at once whatever the checks are doing. The metric names are the exporter's contract
// with its dashboards and alerts; every one is documented in docs/metrics.md (a test keeps the
// two in step).
//
// The families of a snapshot are built at the first scrape that sees it and kept until the
// next snapshot (a snapshot is immutable); nothing is built while nobody scrapes. They are
// served after the exporter's registry's families through promhttp, which encodes and
// compresses them at each scrape (Gatherer.With).
package collector

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// family is the name, help and type of one family the snapshot is served as.
type family struct {
	name, help string
	typ        dto.MetricType
}

func gaugeFamily(subsystem, name, help string) family {
	return family{prometheus.BuildFQName(checks.MetricNamespace, subsystem, name), help, dto.MetricType_GAUGE}
}

var (
	targetUp = gaugeFamily("provider", "target_up",
		"1 when the verdict on the target is Ready, 0 otherwise (the last check's, unless the provider's failureThreshold or successThreshold holds the one before).")
	checkDuration = gaugeFamily("provider", "check_duration_seconds",
		"How long the last check of the target took.")
	checkTimestamp = gaugeFamily("provider", "check_timestamp_seconds",
		"When the last check of the target completed (pass or fail), in seconds since the Unix epoch.")
	lastTransition = gaugeFamily("provider", "target_last_transition_timestamp_seconds",
		"When the verdict on the target last flipped between up and down (a new reason while down is no flip), in seconds since the Unix epoch; before the first flip this process saw, its first check of the target.")
	targetReason = gaugeFamily("provider", "target_reason",
		"1 for the reason of the last verdict on the target (Ready when up); other reasons have no series.")
	consecutiveFailures = gaugeFamily("provider", "target_consecutive_failures",
		"Checks of the target that failed in a row up to the last one, before the provider's failureThreshold (0 when the last check succeeded). Above 0 while target_up is 1: failures pending.")
	consecutiveSuccesses = gaugeFamily("provider", "target_consecutive_successes",
		"Checks of the target that succeeded in a row up to the last one, before the provider's successThreshold (0 when the last check failed). Above 0 while target_up is 0: recovery pending.")
	checksTotal = family{prometheus.BuildFQName(checks.MetricNamespace, "provider", "target_checks_total"),
		"Checks of the target since the exporter listed it: rounds that started its check, and rounds that found an earlier call to it still outstanding (a continuing Timeout); rounds that did not start it are not counted.",
		dto.MetricType_COUNTER}
	checksFailedTotal = family{prometheus.BuildFQName(checks.MetricNamespace, "provider", "target_checks_failed_total"),
		"Checks of the target (as in target_checks_total) whose own result was not Ready, whatever the provider's thresholds published.",
		dto.MetricType_COUNTER}
	targetsUnchecked = gaugeFamily("provider", "targets_unchecked",
		"Targets of the provider without a verdict yet: no round has started their check since they were listed, or their first checks have not met a threshold. They have no target_up series.")
	uncheckedSince = gaugeFamily("provider", "target_unchecked_since_timestamp_seconds",
		"For a target without a verdict yet, when the exporter listed it (its start, or the reload that added it), in seconds since the Unix epoch; no series once it has a verdict.")
	failureThreshold = gaugeFamily("provider", "failure_threshold",
		"The provider's failureThreshold: consecutive failed checks that turn an up target down.")
	successThreshold = gaugeFamily("provider", "success_threshold",
		"The provider's successThreshold: consecutive successful checks that turn a down target up.")
	targetInfo = gaugeFamily("provider", "target_info",
		"1 for every target with labels (its provider's labels and its own, from the providers file), carrying them; join them onto a target's series with * on (provider, target) group_left (LABEL). Targets without labels have no series.")
	providerInfo = gaugeFamily("provider", "info",
		"1 for every configured provider, with its type.")
	roundDuration = gaugeFamily("provider", "check_round_duration_seconds",
		"How long the last completed round of provider checks took.")
	roundsTotal = family{prometheus.BuildFQName(checks.MetricNamespace, "provider", "check_rounds_total"),
		"Rounds of provider checks completed since the exporter started.", dto.MetricType_COUNTER}
	abandonedTotal = family{prometheus.BuildFQName(checks.MetricNamespace, "provider", "checkers_abandoned_total"),
		"Checkers that had not returned by a round's deadline and were abandoned (their targets read Timeout).",
		dto.MetricType_COUNTER}
)

// Gatherer gathers the metrics of the current snapshot. Serve it with the registry holding the
// exporter's other metrics: promhttp.HandlerFor(g.With(reg), opts).
type Gatherer struct {
	snapshot func() *checks.Snapshot

	mu   sync.Mutex // guards snap, mfs and err; concurrent scrapes of a new snapshot share one build
	snap *checks.Snapshot
	mfs  []*dto.MetricFamily
	err  error
}

// NewGatherer returns a Gatherer of the snapshot that snapshot returns at each Gather (normally
// (*checks.Runner).Current). snapshot must be cheap and must not block.
func NewGatherer(snapshot func() *checks.Snapshot) *Gatherer {
	return &Gatherer{snapshot: snapshot}
}

// Gather returns the families of the current snapshot, sorted by name, or none before the first
// snapshot. They are shared by every scrape of that snapshot: callers must not modify them
// (promhttp does not). A snapshot holding two verdicts on one target (a checker's bug) fails
// every gather of it, as a registry fails a collector's duplicate series.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	s := g.snapshot()
	if s == nil {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.snap != s {
		g.snap = s
		g.mfs, g.err = families(s)
	}
	return g.mfs, g.err
}

// With returns a prometheus.Gatherer of reg's families followed by g's, for promhttp.HandlerFor.
// Unlike prometheus.Gatherers it does not check every series of g's families at every scrape,
// which cost a quarter of a scrape's CPU (docs/benchmarks.md): g builds them once per snapshot,
// with valid UTF-8 label values, label pairs in name order and no duplicate series. A family
// name that reg also gathers fails the gather, as prometheus.Gatherers would.
func (g *Gatherer) With(reg prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		own, err := g.Gather()
		if err != nil {
			return nil, err
		}
		mfs, err := reg.Gather()
		for _, mf := range mfs {
			if slices.ContainsFunc(own, func(o *dto.MetricFamily) bool { return o.GetName() == mf.GetName() }) {
				return nil, fmt.Errorf("metric family %s is gathered by the registry and from the snapshot", mf.GetName())
			}
		}
		return append(mfs, own...), err
	})
}

// Label names, shared by every label pair.
var lProvider, lTarget, lReason, lType = new("provider"), new("target"), new("reason"), new("type")

func newFamily(f family, n int) *dto.MetricFamily {
	return &dto.MetricFamily{Name: new(f.name), Help: new(f.help), Type: f.typ.Enum(), Metric: make([]*dto.Metric, 0, n)}
}

func gauge(v float64) *dto.Gauge { return &dto.Gauge{Value: new(v)} }

// labelPair returns name=value; a value that is not valid UTF-8, which would fail the whole
// scrape, is repaired.
func labelPair(name *string, value string) *dto.LabelPair {
	if !utf8.ValidString(value) {
		value = strings.ToValidUTF8(value, "\uFFFD")
	}
	return &dto.LabelPair{Name: name, Value: new(value)}
}

// families returns the families of snapshot s, each sorted as a registry sorts them (by label
// values, in label-name order), so that promhttp's sort finds them sorted. The label pairs of
// every series are in name order: prometheus.Gatherers would otherwise replace them with a
// sorted copy, writing to series that concurrent scrapes share.
func families(s *checks.Snapshot) ([]*dto.MetricFamily, error) {
	b := newFamilyBuilder(len(s.Providers))
	for i := range s.Providers {
		b.addProvider(&s.Providers[i])
	}
	b.addVerdicts()
	return b.gather(s)
}

// targetRef is a target with a verdict, and its provider and target labels, shared by the series
// of the target.
type targetRef struct {
	t      *checks.TargetState
	labels []*dto.LabelPair
}

// familyBuilder builds the families of one snapshot: first of its providers and of every
// target (addProvider), then of the verdicts (addVerdicts).
type familyBuilder struct {
	refs []targetRef
	// Of the providers, and of every target, with a verdict or not.
	info, unchecked, failTh, succTh, since, tinfo, total, failed *dto.MetricFamily
	// Of the verdicts.
	up, duration, timestamp, transition, reason, failures, successes *dto.MetricFamily
	// The provider types' own gauges, by gauge, and in their order.
	own      map[*checks.Gauge]*dto.MetricFamily
	ownOrder []*dto.MetricFamily
}

func newFamilyBuilder(providers int) *familyBuilder {
	return &familyBuilder{
		info:      newFamily(providerInfo, providers),
		unchecked: newFamily(targetsUnchecked, providers),
		failTh:    newFamily(failureThreshold, providers),
		succTh:    newFamily(successThreshold, providers),
		since:     newFamily(uncheckedSince, 0),
		tinfo:     newFamily(targetInfo, 0),
		total:     newFamily(checksTotal, 0),
		failed:    newFamily(checksFailedTotal, 0),
	}
}

// addProvider adds provider p's series, and those of its unchecked targets; it keeps its
// targets with a verdict for addVerdicts.
func (b *familyBuilder) addProvider(p *checks.ProviderState) {
	pp := labelPair(lProvider, p.Name)
	b.info.Metric = append(b.info.Metric, &dto.Metric{Label: []*dto.LabelPair{pp, labelPair(lType, string(p.Type))}, Gauge: gauge(1)})
	b.unchecked.Metric = append(b.unchecked.Metric, &dto.Metric{Label: []*dto.LabelPair{pp}, Gauge: gauge(float64(len(p.Unchecked)))})
	th := p.Thresholds
	if th == (checks.Thresholds{}) {
		th = checks.DefaultThresholds
	}
	b.failTh.Metric = append(b.failTh.Metric, &dto.Metric{Label: []*dto.LabelPair{pp}, Gauge: gauge(float64(max(th.Failure, 1)))})
	b.succTh.Metric = append(b.succTh.Metric, &dto.Metric{Label: []*dto.LabelPair{pp}, Gauge: gauge(float64(max(th.Success, 1)))})
	for j := range p.Targets {
		t := &p.Targets[j]
		b.refs = append(b.refs, targetRef{t: t, labels: []*dto.LabelPair{pp, labelPair(lTarget, t.Target)}})
		b.addTargetLabels(p, b.refs[len(b.refs)-1].labels, t.Target)
	}
	for j := range p.Unchecked {
		u := &p.Unchecked[j]
		labels := []*dto.LabelPair{pp, labelPair(lTarget, u.Target)}
		b.since.Metric = append(b.since.Metric, &dto.Metric{Label: labels, Gauge: gauge(float64(u.Listed.UnixNano()) / 1e9)})
		b.addCounters(labels, u.Checks, u.FailedChecks)
		b.addTargetLabels(p, labels, u.Target)
	}
}

// addTargetLabels adds target's target_info series when it has labels.
func (b *familyBuilder) addTargetLabels(p *checks.ProviderState, labels []*dto.LabelPair, target string) {
	ls := p.Labels.Of(target)
	if len(ls) == 0 {
		return
	}
	pairs := append(make([]*dto.LabelPair, 0, len(labels)+len(ls)), labels...)
	for name, value := range ls {
		pairs = append(pairs, labelPair(new(name), value))
	}
	slices.SortFunc(pairs, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	b.tinfo.Metric = append(b.tinfo.Metric, &dto.Metric{Label: pairs, Gauge: gauge(1)})
}

// addCounters adds a target's check counters.
func (b *familyBuilder) addCounters(labels []*dto.LabelPair, checks, failedChecks uint64) {
	b.total.Metric = append(b.total.Metric, &dto.Metric{Label: labels, Counter: &dto.Counter{Value: new(float64(checks))}})
	b.failed.Metric = append(b.failed.Metric, &dto.Metric{Label: labels, Counter: &dto.Counter{Value: new(float64(failedChecks))}})
}

// addVerdicts adds the series of every target with a verdict, the provider types' own gauges
// among them.
func (b *familyBuilder) addVerdicts() {
	n := len(b.refs)
	b.up, b.duration, b.timestamp = newFamily(targetUp, n), newFamily(checkDuration, n), newFamily(checkTimestamp, n)
	b.transition, b.reason = newFamily(lastTransition, n), newFamily(targetReason, n)
	b.failures, b.successes = newFamily(consecutiveFailures, n), newFamily(consecutiveSuccesses, n)
	b.own = map[*checks.Gauge]*dto.MetricFamily{}
	for _, typ := range checks.Registered() {
		for _, g := range typ.Gauges {
			f := newFamily(family{g.Name, g.Help, dto.MetricType_GAUGE}, 0)
			b.own[g] = f
			b.ownOrder = append(b.ownOrder, f)
		}
	}
	for _, r := range b.refs {
		v := 0.0
		if r.t.Up {
			v = 1
		}
		b.up.Metric = append(b.up.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(v)})
		b.duration.Metric = append(b.duration.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(r.t.Duration.Seconds())})
		b.timestamp.Metric = append(b.timestamp.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(float64(r.t.CheckedAt.UnixNano()) / 1e9)})
		b.transition.Metric = append(b.transition.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(float64(r.t.Since.UnixNano()) / 1e9)})
		b.reason.Metric = append(b.reason.Metric, &dto.Metric{
			Label: []*dto.LabelPair{r.labels[0], labelPair(lReason, string(r.t.Reason)), r.labels[1]}, Gauge: gauge(1)})
		b.failures.Metric = append(b.failures.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(float64(r.t.ConsecutiveFailures))})
		b.successes.Metric = append(b.successes.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(float64(r.t.ConsecutiveSuccesses))})
		b.addCounters(r.labels, r.t.Checks, r.t.FailedChecks)
		b.addSamples(r)
	}
}

// addSamples adds the samples of r's verdict to the provider types' own gauges.
func (b *familyBuilder) addSamples(r targetRef) {
	for _, sm := range r.t.Samples {
		f := b.own[sm.Gauge]
		if f == nil {
			continue // the runner keeps only the samples of declared gauges
		}
		labels := append(make([]*dto.LabelPair, 0, 2+len(sm.LabelValues)), r.labels...)
		for i, name := range sm.Gauge.Labels {
			labels = append(labels, labelPair(new(name), sm.LabelValues[i]))
		}
		slices.SortFunc(labels, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
		f.Metric = append(f.Metric, &dto.Metric{Label: labels, Gauge: gauge(sm.Value)})
	}
}

// gather returns the families built, with the round's own, each sorted, and sorted by name; an
// error when one target has two verdicts.
func (b *familyBuilder) gather(s *checks.Snapshot) ([]*dto.MetricFamily, error) {
	mfs := []*dto.MetricFamily{newFamily(roundsTotal, 1), newFamily(abandonedTotal, 1)}
	mfs[0].Metric = append(mfs[0].Metric, &dto.Metric{Counter: &dto.Counter{Value: new(float64(s.Round))}})
	mfs[1].Metric = append(mfs[1].Metric, &dto.Metric{Counter: &dto.Counter{Value: new(float64(s.AbandonedTotal))}})
	if s.Round > 0 {
		// Before the first round there is no last round: no series rather than a made-up 0.
		rd := newFamily(roundDuration, 1)
		rd.Metric = append(rd.Metric, &dto.Metric{Gauge: gauge(s.RoundDuration.Seconds())})
		mfs = append(mfs, rd)
	}
	for _, f := range append([]*dto.MetricFamily{b.info, b.unchecked, b.failTh, b.succTh, b.up, b.duration, b.timestamp,
		b.transition, b.reason, b.failures, b.successes, b.since, b.total, b.failed, b.tinfo}, b.ownOrder...) {
		if len(f.Metric) > 0 {
			slices.SortStableFunc(f.Metric, byLabelValues)
			mfs = append(mfs, f)
		}
	}
	// Every target, with a verdict or not, has one series in the counters: duplicates there,
	// sorted, are duplicates everywhere.
	for i := 1; i < len(b.total.Metric); i++ {
		if byLabelValues(b.total.Metric[i-1], b.total.Metric[i]) == 0 {
			l := b.total.Metric[i].Label
			return nil, fmt.Errorf("provider %q target %q: collected before with the same name and label values (two verdicts on one target)", l[0].GetValue(), l[1].GetValue())
		}
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs, nil
}

// byLabelValues orders the series of a family (label pairs sorted by name) as a registry does.
func byLabelValues(a, b *dto.Metric) int {
	for i := range min(len(a.Label), len(b.Label)) {
		if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
			return c
		}
	}
	return len(a.Label) - len(b.Label)
}
