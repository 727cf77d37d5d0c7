package collector

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// sample is one series of a rendering: its label pairs and value are built once per snapshot and
// shared by every scrape of it. Sharing is safe because the registry treats a collected metric's
// label pairs and value as immutable (client_golang copies rather than sorts them in place).
type sample struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	gauge   *dto.Gauge
	counter *dto.Counter
}

func (s *sample) Desc() *prometheus.Desc { return s.desc }

func (s *sample) Write(m *dto.Metric) error {
	m.Label = s.labels
	m.Gauge = s.gauge
	m.Counter = s.counter
	return nil
}

// Label names, shared by every pair; the text encoder reads them for every series, so one copy
// of each keeps that read in cache.
var (
	nameProvider = new("provider")
	nameTarget   = new("target")
	nameReason   = new("reason")
	namePool     = new("pool")
	nameType     = new("type")

	gaugeOne  = &dto.Gauge{Value: new(1.0)}
	gaugeZero = &dto.Gauge{Value: new(0.0)}
)

type pairKey struct {
	name  *string
	value string
}

type internedPair struct {
	pair *dto.LabelPair
	gen  uint64
}

type targetKey struct{ provider, target string }

// targetLabels are the label sets of one target's series, kept across snapshots.
type targetLabels struct {
	gen        uint64
	pt         []*dto.LabelPair // provider, target
	reason     checks.Reason
	withReason []*dto.LabelPair // provider, reason, target
	pool       string
	withPool   []*dto.LabelPair // pool, provider, target
}

// labelCache interns label pairs and per-target label sets across renderings; entries not used
// by the newest rendering are dropped, so removed targets do not accumulate.
type labelCache struct {
	gen     uint64
	pairs   map[pairKey]*internedPair
	targets map[targetKey]*targetLabels
}

func newLabelCache() *labelCache {
	return &labelCache{pairs: map[pairKey]*internedPair{}, targets: map[targetKey]*targetLabels{}}
}

// pair returns the interned label pair name=value. A value that is not valid UTF-8 (which would
// make the registry fail the whole scrape) is repaired.
func (lc *labelCache) pair(name *string, value string) *dto.LabelPair {
	k := pairKey{name, value}
	ip := lc.pairs[k]
	if ip == nil {
		v := value
		if !utf8.ValidString(v) {
			v = strings.ToValidUTF8(v, "\uFFFD")
		}
		ip = &internedPair{pair: &dto.LabelPair{Name: name, Value: new(v)}}
		lc.pairs[k] = ip
	}
	ip.gen = lc.gen
	return ip.pair
}

func (lc *labelCache) target(provider string, t *checks.TargetState) *targetLabels {
	k := targetKey{provider, t.Target}
	tl := lc.targets[k]
	pp, tp := lc.pair(nameProvider, provider), lc.pair(nameTarget, t.Target)
	if tl == nil {
		tl = &targetLabels{pt: []*dto.LabelPair{pp, tp}}
		lc.targets[k] = tl
	}
	tl.gen = lc.gen
	if tl.withReason == nil || tl.reason != t.Reason {
		tl.reason = t.Reason
		tl.withReason = []*dto.LabelPair{pp, lc.pair(nameReason, string(t.Reason)), tp}
	} else {
		lc.pair(nameReason, string(t.Reason)) // keep it interned
	}
	if t.Pool != nil {
		if tl.withPool == nil || tl.pool != t.Pool.Name {
			tl.pool = t.Pool.Name
			tl.withPool = []*dto.LabelPair{lc.pair(namePool, t.Pool.Name), pp, tp}
		} else {
			lc.pair(namePool, t.Pool.Name)
		}
	}
	return tl
}

// sweep drops what the current rendering did not use.
func (lc *labelCache) sweep() {
	for k, ip := range lc.pairs {
		if ip.gen != lc.gen {
			delete(lc.pairs, k)
		}
	}
	for k, tl := range lc.targets {
		if tl.gen != lc.gen {
			delete(lc.targets, k)
		}
	}
}

// ref is one target of a snapshot with its label sets.
type ref struct {
	provider string
	t        *checks.TargetState
	labels   *targetLabels
}

// metrics renders snapshot s as the collector sends it.
func (lc *labelCache) metrics(s *checks.Snapshot) []prometheus.Metric {
	samples := lc.samples(s)
	out := make([]prometheus.Metric, len(samples))
	for i := range samples {
		out[i] = &samples[i]
	}
	return out
}

// samples renders snapshot s. The series of a family are contiguous, and each family is emitted
// in the order the registry sorts it into (by label values, in label-name order), so its sort of
// every scrape finds it already sorted.
func (lc *labelCache) samples(s *checks.Snapshot) []sample {
	lc.gen++

	var refs []ref
	pools := 0
	for i := range s.Providers {
		p := &s.Providers[i]
		for j := range p.Targets {
			t := &p.Targets[j]
			refs = append(refs, ref{provider: p.Name, t: t, labels: lc.target(p.Name, t)})
			if t.Pool != nil {
				pools++
			}
		}
	}
	lc.sweep()

	total := 3 + len(s.Providers) + 4*len(refs) + 3*pools
	samples := make([]sample, 0, total)
	// Values are allocated in one block rather than one small object per series.
	values := make([]dto.Gauge, 0, 2*len(refs)+3*pools)
	floats := make([]float64, 0, 2*len(refs)+3*pools)
	gauge := func(v float64) *dto.Gauge {
		floats = append(floats, v)
		values = append(values, dto.Gauge{Value: &floats[len(floats)-1]})
		return &values[len(values)-1]
	}

	samples = append(samples,
		sample{desc: roundsTotal, counter: &dto.Counter{Value: new(float64(s.Round))}},
		sample{desc: abandonedTotal, counter: &dto.Counter{Value: new(float64(s.AbandonedTotal))}})
	if s.Round > 0 {
		// Before the first round there is no last round: no series rather than a made-up 0.
		samples = append(samples, sample{desc: roundDuration, gauge: &dto.Gauge{Value: new(s.RoundDuration.Seconds())}})
	}

	providers := make([]*checks.ProviderState, len(s.Providers))
	for i := range s.Providers {
		providers[i] = &s.Providers[i]
	}
	slices.SortFunc(providers, func(a, b *checks.ProviderState) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range providers {
		samples = append(samples, sample{desc: providerInfo, gauge: gaugeOne,
			labels: []*dto.LabelPair{lc.pair(nameProvider, p.Name), lc.pair(nameType, string(p.Type))}})
	}

	slices.SortFunc(refs, func(a, b ref) int {
		return cmp.Or(strings.Compare(a.provider, b.provider), strings.Compare(a.t.Target, b.t.Target))
	})
	for _, r := range refs {
		up := gaugeZero
		if r.t.Up {
			up = gaugeOne
		}
		samples = append(samples, sample{desc: targetUp, labels: r.labels.pt, gauge: up})
	}
	for _, r := range refs {
		samples = append(samples, sample{desc: checkDuration, labels: r.labels.pt, gauge: gauge(r.t.Duration.Seconds())})
	}
	for _, r := range refs {
		samples = append(samples, sample{desc: checkTimestamp, labels: r.labels.pt,
			gauge: gauge(float64(r.t.CheckedAt.UnixNano()) / 1e9)})
	}

	slices.SortStableFunc(refs, func(a, b ref) int {
		return cmp.Or(strings.Compare(a.provider, b.provider), strings.Compare(string(a.t.Reason), string(b.t.Reason)))
	})
	for _, r := range refs {
		samples = append(samples, sample{desc: targetReason, labels: r.labels.withReason, gauge: gaugeOne})
	}

	withPool := slices.DeleteFunc(refs, func(r ref) bool { return r.t.Pool == nil })
	slices.SortFunc(withPool, func(a, b ref) int {
		return cmp.Or(strings.Compare(a.t.Pool.Name, b.t.Pool.Name),
			strings.Compare(a.provider, b.provider), strings.Compare(a.t.Target, b.t.Target))
	})
	for _, d := range []struct {
		desc  *prometheus.Desc
		value func(*checks.StoragePool) uint64
	}{
		{poolCapacity, func(p *checks.StoragePool) uint64 { return p.CapacityBytes }},
		{poolAllocation, func(p *checks.StoragePool) uint64 { return p.AllocationBytes }},
		{poolAvailable, func(p *checks.StoragePool) uint64 { return p.AvailableBytes }},
	} {
		for _, r := range withPool {
			samples = append(samples, sample{desc: d.desc, labels: r.labels.withPool, gauge: gauge(float64(d.value(r.t.Pool)))})
		}
	}
	return samples
}
