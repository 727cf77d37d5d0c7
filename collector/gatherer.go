package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// Gatherer serves the same families as the collector New returns, without a registry: they are
// built once per snapshot, already sorted and checked, and every later Gather returns them as
// they are. A registry re-checks every series of every collector at every scrape (about half
// of the CPU time of a scrape of 10,000 targets), which for an immutable snapshot is wasted
// work. Serve it with Merge (or Handler) beside the registry holding the other metrics.
type Gatherer struct {
	snapshot func() *checks.Snapshot
	current  atomic.Pointer[snapshotFamilies]

	mu     sync.Mutex // serialises building; guards labels
	labels *labelCache

	warmMu   sync.Mutex // guards warmKeys
	warmKeys []encodingKey
}

// NewGatherer returns a Gatherer of the snapshot that snapshot returns at each Gather (normally
// (*checks.Runner).Current). snapshot must be cheap and must not block.
func NewGatherer(snapshot func() *checks.Snapshot) *Gatherer {
	return &Gatherer{snapshot: snapshot, labels: newLabelCache()}
}

// Gather returns the families of the current snapshot, sorted by name, or none before the
// first snapshot. The families are shared by every caller until the snapshot changes: they
// must not be modified.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	f := g.families()
	if f == nil {
		return nil, nil
	}
	return slices.Clip(f.mfs), f.err
}

// Warm builds, ahead of the first scrape, what that scrape would otherwise build for the
// current snapshot: its families and, for each Handler serving g, its encodings in the formats
// Prometheus asks for by default (OpenMetrics and the text format 0.0.4, gzip-compressed, as
// Prometheus 2 and 3 negotiate them). Call it after each new snapshot (see
// checks.Runner.Subscribe), off the scrape path: it moves the cost of the first scrape after a
// round (tens of milliseconds at 10,000 targets) out of the scrape, it does not remove it.
//
// A scrape that arrives meanwhile shares the work rather than repeating it: it waits only for
// the families or the encoding it needs itself, if Warm is building them at that moment, never
// for the other encodings. Warm returns early when ctx ends.
func (g *Gatherer) Warm(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	f := g.families()
	if f == nil || f.err != nil {
		return // nothing to encode, or the scrape is promhttp's (it reports the error)
	}
	g.warmMu.Lock()
	keys := slices.Clone(g.warmKeys)
	g.warmMu.Unlock()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		// An error recurs at the scrape, which falls back to promhttp and reports it there.
		_, _ = f.encoding(k)
	}
}

// addWarmKeys adds the encodings Warm builds (a Handler's, for Prometheus's default requests).
func (g *Gatherer) addWarmKeys(keys ...encodingKey) {
	g.warmMu.Lock()
	defer g.warmMu.Unlock()
	for _, k := range keys {
		if !slices.Contains(g.warmKeys, k) {
			g.warmKeys = append(g.warmKeys, k)
		}
	}
}

// Reservation returns a collector that describes the snapshot's metrics and collects nothing.
// Registered on the registry served beside the Gatherer, it makes the registry refuse, when it
// is registered, a collector of a family the Gatherer serves, which Merge would otherwise
// refuse only at every scrape.
func (g *Gatherer) Reservation() prometheus.Collector { return reservation{} }

type reservation struct{}

func (reservation) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (reservation) Collect(chan<- prometheus.Metric) {}

// snapshotFamilies is one snapshot's families, and their encodings as the handler built them.
type snapshotFamilies struct {
	snap *checks.Snapshot
	mfs  []*dto.MetricFamily
	// err is what a registry would have answered for these series (a duplicate series).
	err error

	mu        sync.Mutex // guards the map encodings, not the entries
	encodings map[encodingKey]*encodingEntry
	// encoded counts the encodings built, so that tests can tell one was not built twice.
	encoded atomic.Int64
}

// families returns the families of the current snapshot, building them at the first call
// that sees it; nil before the first snapshot.
func (g *Gatherer) families() *snapshotFamilies {
	s := g.snapshot()
	if s == nil {
		return nil
	}
	if f := g.current.Load(); f != nil && f.snap == s {
		return f
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.current.Load(); f != nil && f.snap == s {
		return f // a concurrent scrape just built it
	}
	f := buildFamilies(s, g.labels.samples(s))
	g.current.Store(f)
	return f
}

// buildFamilies groups the samples (contiguous per family) into families, in the order and
// shape a registry gathers them: families sorted by name, series by label values, no family
// without series.
func buildFamilies(s *checks.Snapshot, samples []sample) *snapshotFamilies {
	f := &snapshotFamilies{snap: s}
	// One block for the series rather than one small object each.
	metrics := make([]dto.Metric, len(samples))
	// The errors a registry would report, in the order it would (the order of collection).
	var errs prometheus.MultiError
	for i := 0; i < len(samples); {
		desc := samples[i].desc
		meta := familyMeta[desc]
		mf := &dto.MetricFamily{Name: new(meta.name), Help: new(meta.help), Type: meta.typ.Enum()}
		j := i
		for ; j < len(samples) && samples[j].desc == desc; j++ {
			m := &metrics[j]
			m.Label, m.Gauge, m.Counter = samples[j].labels, samples[j].gauge, samples[j].counter
		}
		mf.Metric = make([]*dto.Metric, j-i)
		for k := range mf.Metric {
			mf.Metric[k] = &metrics[i+k]
		}
		if !slices.IsSortedFunc(mf.Metric, compareSeries) {
			slices.SortStableFunc(mf.Metric, compareSeries)
		}
		for k := 1; k < len(mf.Metric); k++ {
			if compareSeries(mf.Metric[k-1], mf.Metric[k]) == 0 {
				errs = append(errs, fmt.Errorf("collected metric %q { %s} was collected before with the same name and label values",
					meta.name, mf.Metric[k]))
			}
		}
		f.mfs = append(f.mfs, mf)
		i = j
	}
	slices.SortFunc(f.mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	f.err = errs.MaybeUnwrap()
	return f
}

// compareSeries orders the series of a family as the registry does: by label values, in
// label-name order (the label pairs of a series are sorted by name).
func compareSeries(a, b *dto.Metric) int {
	if len(a.Label) != len(b.Label) {
		return len(a.Label) - len(b.Label)
	}
	for n, lp := range a.Label {
		if c := strings.Compare(lp.GetValue(), b.Label[n].GetValue()); c != 0 {
			return c
		}
	}
	return 0
}

// Merge returns a Gatherer of reg's families and snap's, sorted by name, as a registry holding
// both would gather them. The two must not share a family name (a shared name is an error).
// Unlike prometheus.Gatherers, it does not re-check the snapshot's series at every gather.
func Merge(reg prometheus.Gatherer, snap *Gatherer) prometheus.Gatherer {
	return merged{reg: reg, snap: snap}
}

type merged struct {
	reg  prometheus.Gatherer
	snap *Gatherer
}

func (m merged) Gather() ([]*dto.MetricFamily, error) {
	a, errA := m.reg.Gather()
	b, errB := m.snap.Gather()
	out := make([]*dto.MetricFamily, 0, len(a)+len(b))
	var errDup error
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0:
			out, a = append(out, a...), nil
		case len(a) == 0:
			out, b = append(out, b...), nil
		default:
			switch c := strings.Compare(a[0].GetName(), b[0].GetName()); {
			case c < 0:
				out, a = append(out, a[0]), a[1:]
			case c > 0:
				out, b = append(out, b[0]), b[1:]
			default:
				errDup = errors.Join(errDup, fmt.Errorf("metric family %s is gathered both by the registry and from the snapshot", a[0].GetName()))
				out, a, b = append(out, a[0]), a[1:], b[1:]
			}
		}
	}
	return out, errors.Join(errA, errB, errDup)
}
