package collector

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// snapshotCollector sends the metrics of one snapshot as const metrics.
type snapshotCollector struct{ snap *checks.Snapshot }

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap
	ch <- prometheus.MustNewConstMetric(roundsTotal, prometheus.CounterValue, float64(s.Round))
	ch <- prometheus.MustNewConstMetric(abandonedTotal, prometheus.CounterValue, float64(s.AbandonedTotal))
	if s.Round > 0 {
		// Before the first round there is no last round: no series rather than a made-up 0.
		ch <- prometheus.MustNewConstMetric(roundDuration, prometheus.GaugeValue, s.RoundDuration.Seconds())
	}
	for _, p := range s.Providers {
		provider := validUTF8(p.Name)
		ch <- prometheus.MustNewConstMetric(providerInfo, prometheus.GaugeValue, 1, provider, string(p.Type))
		for i := range p.Targets {
			t := &p.Targets[i]
			target := validUTF8(t.Target)
			up := 0.0
			if t.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(targetUp, prometheus.GaugeValue, up, provider, target)
			ch <- prometheus.MustNewConstMetric(checkDuration, prometheus.GaugeValue, t.Duration.Seconds(), provider, target)
			ch <- prometheus.MustNewConstMetric(checkTimestamp, prometheus.GaugeValue,
				float64(t.CheckedAt.UnixNano())/1e9, provider, target)
			ch <- prometheus.MustNewConstMetric(targetReason, prometheus.GaugeValue, 1, provider, target, string(t.Reason))
			if pool := t.Pool; pool != nil {
				name := validUTF8(pool.Name)
				ch <- prometheus.MustNewConstMetric(poolCapacity, prometheus.GaugeValue, float64(pool.CapacityBytes), provider, target, name)
				ch <- prometheus.MustNewConstMetric(poolAllocation, prometheus.GaugeValue, float64(pool.AllocationBytes), provider, target, name)
				ch <- prometheus.MustNewConstMetric(poolAvailable, prometheus.GaugeValue, float64(pool.AvailableBytes), provider, target, name)
			}
		}
	}
}

// validUTF8 repairs a label value that is not valid UTF-8, which would fail the whole scrape.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// snapshotGatherer gathers the metrics of the current snapshot, built once per snapshot:
// snapshots are immutable, so the families stay exact until the next one.
type snapshotGatherer struct {
	snapshot func() *checks.Snapshot

	mu   sync.Mutex // guards the fields below; a concurrent scrape of a new snapshot waits for one build
	snap *checks.Snapshot
	mfs  []*dto.MetricFamily
}

func (g *snapshotGatherer) Gather() ([]*dto.MetricFamily, error) {
	s := g.snapshot()
	if s == nil {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.snap != s {
		g.snap, g.mfs = s, familiesOf(s)
	}
	return g.mfs, nil
}

var (
	lProvider, lTarget, lReason, lPool, lType = new("provider"), new("target"), new("reason"), new("pool"), new("type")
)

func newFamily(d *prometheus.Desc, typ dto.MetricType, n int) *dto.MetricFamily {
	m := familyMeta[d]
	return &dto.MetricFamily{Name: new(m.name), Help: new(m.help), Type: typ.Enum(), Metric: make([]*dto.Metric, 0, n)}
}

func gauge(v float64) *dto.Gauge { return &dto.Gauge{Value: new(v)} }

func labelPair(name *string, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: name, Value: new(validUTF8(value))}
}

// familiesOf returns the families of snapshot s, each sorted as a registry sorts them.
func familiesOf(s *checks.Snapshot) []*dto.MetricFamily {
	type ref struct {
		provider, target string
		t                *checks.TargetState
		labels           []*dto.LabelPair // provider, target
	}
	var refs []ref
	providers := newFamily(providerInfo, dto.MetricType_GAUGE, len(s.Providers))
	for i := range s.Providers {
		p := &s.Providers[i]
		pp := labelPair(lProvider, p.Name)
		providers.Metric = append(providers.Metric, &dto.Metric{Label: []*dto.LabelPair{pp, labelPair(lType, string(p.Type))}, Gauge: gauge(1)})
		for j := range p.Targets {
			t := &p.Targets[j]
			refs = append(refs, ref{provider: p.Name, target: t.Target, t: t, labels: []*dto.LabelPair{pp, labelPair(lTarget, t.Target)}})
		}
	}
	slices.SortFunc(providers.Metric, func(a, b *dto.Metric) int { return strings.Compare(a.Label[0].GetValue(), b.Label[0].GetValue()) })
	slices.SortFunc(refs, func(a, b ref) int {
		return cmp.Or(strings.Compare(a.provider, b.provider), strings.Compare(a.target, b.target))
	})

	up := newFamily(targetUp, dto.MetricType_GAUGE, len(refs))
	duration := newFamily(checkDuration, dto.MetricType_GAUGE, len(refs))
	timestamp := newFamily(checkTimestamp, dto.MetricType_GAUGE, len(refs))
	reason := newFamily(targetReason, dto.MetricType_GAUGE, len(refs))
	capacity := newFamily(poolCapacity, dto.MetricType_GAUGE, len(refs))
	allocation := newFamily(poolAllocation, dto.MetricType_GAUGE, len(refs))
	available := newFamily(poolAvailable, dto.MetricType_GAUGE, len(refs))
	for _, r := range refs {
		v := 0.0
		if r.t.Up {
			v = 1
		}
		up.Metric = append(up.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(v)})
		duration.Metric = append(duration.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(r.t.Duration.Seconds())})
		timestamp.Metric = append(timestamp.Metric, &dto.Metric{Label: r.labels, Gauge: gauge(float64(r.t.CheckedAt.UnixNano()) / 1e9)})
		reason.Metric = append(reason.Metric, &dto.Metric{Label: []*dto.LabelPair{r.labels[0], labelPair(lReason, string(r.t.Reason)), r.labels[1]}, Gauge: gauge(1)})
		if p := r.t.Pool; p != nil {
			labels := []*dto.LabelPair{labelPair(lPool, p.Name), r.labels[0], r.labels[1]}
			capacity.Metric = append(capacity.Metric, &dto.Metric{Label: labels, Gauge: gauge(float64(p.CapacityBytes))})
			allocation.Metric = append(allocation.Metric, &dto.Metric{Label: labels, Gauge: gauge(float64(p.AllocationBytes))})
			available.Metric = append(available.Metric, &dto.Metric{Label: labels, Gauge: gauge(float64(p.AvailableBytes))})
		}
	}
	byValues := func(a, b *dto.Metric) int {
		for i := range a.Label {
			if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
				return c
			}
		}
		return 0
	}
	for _, f := range []*dto.MetricFamily{reason, capacity, allocation, available} {
		slices.SortStableFunc(f.Metric, byValues)
	}

	mfs := []*dto.MetricFamily{
		newFamily(roundsTotal, dto.MetricType_COUNTER, 1), newFamily(abandonedTotal, dto.MetricType_COUNTER, 1),
	}
	mfs[0].Metric = append(mfs[0].Metric, &dto.Metric{Counter: &dto.Counter{Value: new(float64(s.Round))}})
	mfs[1].Metric = append(mfs[1].Metric, &dto.Metric{Counter: &dto.Counter{Value: new(float64(s.AbandonedTotal))}})
	if s.Round > 0 {
		// Before the first round there is no last round: no series rather than a made-up 0.
		rd := newFamily(roundDuration, dto.MetricType_GAUGE, 1)
		rd.Metric = append(rd.Metric, &dto.Metric{Gauge: gauge(s.RoundDuration.Seconds())})
		mfs = append(mfs, rd)
	}
	for _, f := range []*dto.MetricFamily{providers, up, duration, timestamp, reason, capacity, allocation, available} {
		if len(f.Metric) > 0 {
			mfs = append(mfs, f)
		}
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs
}
