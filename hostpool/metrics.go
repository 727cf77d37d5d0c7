package hostpool

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/provider-health-exporter/provider-health-exporter/internal/metricns"
)

// counters are a pool's numbers: each pool keeps its own (its tests read them), and the pools of
// one name share another set, which the metrics read.
type counters struct {
	links, abandoned, inUse atomic.Int64
	// unresponsive counts hosts whose last dial ran out a stage's bound or whose last probe
	// was abandoned.
	unresponsive atomic.Int64
	handshakes   atomic.Uint64
	dials        map[string]*atomic.Uint64 // fixed keys: "ok" and every Stage
}

func newCounters() *counters {
	c := &counters{dials: map[string]*atomic.Uint64{resultOK: {}}}
	for _, s := range Stages {
		c.dials[string(s)] = &atomic.Uint64{}
	}
	return c
}

func (c *counters) dialCounts() map[string]uint64 {
	m := make(map[string]uint64, len(c.dials))
	for k, v := range c.dials {
		m[k] = v.Load()
	}
	return m
}

// dialResult is the dials metric's result label of a dial's outcome.
func dialResult(err error) string {
	if err == nil {
		return resultOK
	}
	var de *DialError
	if errors.As(err, &de) && !de.Aborted {
		return string(de.Stage)
	}
	// Not a failure of the host: the caller gave up or the pool closed mid-dial. Not counted.
	return ""
}

func (p *Pool) countDial(err error) {
	r := dialResult(err)
	if r == "" {
		return
	}
	p.local.dials[r].Add(1)
	p.stats.dials[r].Add(1)
}

func (p *Pool) countHandshake() { p.local.handshakes.Add(1) }

// providerStats are the metrics of the pools of one name. A provider rebuilt by a reload gets a
// new pool while the old one still closes; both count into the same providerStats, so counters
// stay monotonic across reloads and nothing is registered twice.
type providerStats struct {
	refs int // pools of this name that are open; guarded by poolSet.mu
	*counters
}

// poolSet is every open pool's metrics, by name: what the collector reads.
type poolSet struct {
	mu     sync.Mutex
	byName map[string]*providerStats
}

var shared = &poolSet{byName: map[string]*providerStats{}}

func (s *poolSet) join(name string) *providerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, ok := s.byName[name]
	if !ok {
		ps = &providerStats{counters: newCounters()}
		s.byName[name] = ps
	}
	ps.refs++
	return ps
}

// leave drops a closed pool; the series of a name go away with its last pool.
func (s *poolSet) leave(name string, ps *providerStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps.refs--
	if ps.refs <= 0 && s.byName[name] == ps {
		delete(s.byName, name)
	}
}

var (
	connectionsDesc = prometheus.NewDesc(prometheus.BuildFQName(metricns.Namespace, "kvm_pool", "connections"),
		"Open SSH connections to KVM hosts (one per host while its link lives).", []string{"provider"}, nil)
	dialsDesc = prometheus.NewDesc(prometheus.BuildFQName(metricns.Namespace, "kvm_pool", "dials_total"),
		"Connection attempts to KVM hosts by result: ok, or the stage that failed.", []string{"provider", "result"}, nil)
	abandonedDesc = prometheus.NewDesc(prometheus.BuildFQName(metricns.Namespace, "kvm_pool", "abandoned_probes"),
		"Probes abandoned at their deadline whose RPCs have not returned yet (at most one per host).", []string{"provider"}, nil)
	unresponsiveDesc = prometheus.NewDesc(prometheus.BuildFQName(metricns.Namespace, "kvm_pool", "unresponsive_hosts"),
		"KVM hosts whose last dial ran out a stage's bound or whose last probe was abandoned: each round checks them after the others.", []string{"provider"}, nil)
)

// collector reads the metrics of every open pool of the process.
type collector struct{}

var theCollector prometheus.Collector = collector{}

// Collector returns the collector of the metrics of every open pool in the process, labelled by
// each pool's Name. Register it once; pools join and leave it as they are created and closed.
func Collector() prometheus.Collector { return theCollector }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectionsDesc
	ch <- dialsDesc
	ch <- abandonedDesc
	ch <- unresponsiveDesc
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for name, ps := range shared.byName {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(ps.links.Load()), name)
		ch <- prometheus.MustNewConstMetric(abandonedDesc, prometheus.GaugeValue, float64(ps.abandoned.Load()), name)
		ch <- prometheus.MustNewConstMetric(unresponsiveDesc, prometheus.GaugeValue, float64(ps.unresponsive.Load()), name)
		for result, n := range ps.dials {
			ch <- prometheus.MustNewConstMetric(dialsDesc, prometheus.CounterValue, float64(n.Load()), name, result)
		}
	}
}
