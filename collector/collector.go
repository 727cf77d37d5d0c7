// Package collector turns the runner's current checks.Snapshot into Prometheus metrics. A scrape
// never runs a check and never waits for a round: it reads the newest immutable snapshot, so it
// returns at once whatever the checks are doing. The metric names are the exporter's contract with
// its dashboards and alerts; every one is documented in docs/metrics.md (a test keeps the two in
// step).
package collector

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// Namespace prefixes every metric the exporter exports.
const Namespace = "proxy_operator"

// familyMeta is the name, help and type of every family, by description: the Gatherer builds
// its families from them.
var familyMeta = map[*prometheus.Desc]family{}

type family struct {
	name, help string
	typ        dto.MetricType
}

func newDesc(subsystem, name string, typ dto.MetricType, help string, labels []string) *prometheus.Desc {
	fq := prometheus.BuildFQName(Namespace, subsystem, name)
	d := prometheus.NewDesc(fq, help, labels, nil)
	familyMeta[d] = family{name: fq, help: help, typ: typ}
	return d
}

var (
	targetLabelNames = []string{"provider", "target"}
	poolLabelNames   = []string{"provider", "target", "pool"}

	targetUp = newDesc("provider", "target_up", dto.MetricType_GAUGE,
		"1 when the last check of the target gave the verdict Ready, 0 otherwise.",
		targetLabelNames)
	checkDuration = newDesc("provider", "check_duration_seconds", dto.MetricType_GAUGE,
		"How long the last check of the target took.",
		targetLabelNames)
	checkTimestamp = newDesc("provider", "check_timestamp_seconds", dto.MetricType_GAUGE,
		"When the last check of the target completed (pass or fail), in seconds since the Unix epoch.",
		targetLabelNames)
	targetReason = newDesc("provider", "target_reason", dto.MetricType_GAUGE,
		"1 for the reason of the last verdict on the target (Ready when up); other reasons have no series.",
		[]string{"provider", "target", "reason"})
	providerInfo = newDesc("provider", "info", dto.MetricType_GAUGE,
		"1 for every configured provider, with its type.",
		[]string{"provider", "type"})
	poolCapacity = newDesc("kvm", "storage_pool_capacity_bytes", dto.MetricType_GAUGE,
		"Capacity of the KVM host's storage pool, as read by the last check.",
		poolLabelNames)
	poolAllocation = newDesc("kvm", "storage_pool_allocation_bytes", dto.MetricType_GAUGE,
		"Bytes allocated in the KVM host's storage pool, as read by the last check.",
		poolLabelNames)
	poolAvailable = newDesc("kvm", "storage_pool_available_bytes", dto.MetricType_GAUGE,
		"Bytes available in the KVM host's storage pool, as read by the last check.",
		poolLabelNames)
	roundsTotal = newDesc("provider", "check_rounds_total", dto.MetricType_COUNTER,
		"Rounds of provider checks completed since the exporter started.",
		nil)
	roundDuration = newDesc("provider", "check_round_duration_seconds", dto.MetricType_GAUGE,
		"How long the last completed round of provider checks took.",
		nil)
	abandonedTotal = newDesc("provider", "checkers_abandoned_total", dto.MetricType_COUNTER,
		"Checkers that had not returned by a round's deadline and were abandoned (their targets read Timeout).",
		nil)

	allDescs = []*prometheus.Desc{
		targetUp, checkDuration, checkTimestamp, targetReason, providerInfo,
		poolCapacity, poolAllocation, poolAvailable,
		roundsTotal, roundDuration, abandonedTotal,
	}
)

// collector reads the snapshot function's result at every scrape. The metrics of a snapshot are
// built once, at the first scrape that sees it, and served from that rendering until the snapshot
// changes (snapshots are immutable, so the rendering stays exact). Label pairs are interned
// across snapshots, so a round that changes nothing but values allocates little.
type collector struct {
	snapshot func() *checks.Snapshot
	rendered atomic.Pointer[rendering]

	mu     sync.Mutex // serialises rendering; guards labels
	labels *labelCache
}

// rendering is the metrics of one snapshot, ready to send.
type rendering struct {
	snap    *checks.Snapshot
	metrics []prometheus.Metric
}

// New returns a Collector exporting the snapshot that snapshot returns at each scrape (normally
// (*checks.Runner).Current). snapshot must be cheap and must not block.
//
// A registry checks and encodes every series a collector sends at every scrape; the exporter
// serves its snapshot with NewGatherer and Handler instead, which do that once per snapshot.
func New(snapshot func() *checks.Snapshot) prometheus.Collector {
	return &collector{snapshot: snapshot, labels: newLabelCache()}
}

// Describe sends every metric's description; the set is fixed.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect sends the metrics of the current snapshot.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	if s == nil {
		return
	}
	r := c.rendered.Load()
	if r == nil || r.snap != s {
		r = c.render(s)
	}
	for _, m := range r.metrics {
		ch <- m
	}
}

// render builds (or, when a concurrent scrape just did, reuses) the rendering of s.
func (c *collector) render(s *checks.Snapshot) *rendering {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.rendered.Load(); r != nil && r.snap == s {
		return r
	}
	r := &rendering{snap: s, metrics: c.labels.metrics(s)}
	c.rendered.Store(r)
	return r
}
