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

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// Namespace prefixes every metric the exporter exports.
const Namespace = "proxy_operator"

var (
	targetLabelNames = []string{"provider", "target"}
	poolLabelNames   = []string{"provider", "target", "pool"}

	targetUp = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "target_up"),
		"1 when the last check of the target gave the verdict Ready, 0 otherwise.",
		targetLabelNames, nil)
	checkDuration = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "check_duration_seconds"),
		"How long the last check of the target took.",
		targetLabelNames, nil)
	checkTimestamp = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "check_timestamp_seconds"),
		"When the last check of the target completed (pass or fail), in seconds since the Unix epoch.",
		targetLabelNames, nil)
	targetReason = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "target_reason"),
		"1 for the reason of the last verdict on the target (Ready when up); other reasons have no series.",
		[]string{"provider", "target", "reason"}, nil)
	providerInfo = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "info"),
		"1 for every configured provider, with its type.",
		[]string{"provider", "type"}, nil)
	poolCapacity = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "kvm", "storage_pool_capacity_bytes"),
		"Capacity of the KVM host's storage pool, as read by the last check.",
		poolLabelNames, nil)
	poolAllocation = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "kvm", "storage_pool_allocation_bytes"),
		"Bytes allocated in the KVM host's storage pool, as read by the last check.",
		poolLabelNames, nil)
	poolAvailable = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "kvm", "storage_pool_available_bytes"),
		"Bytes available in the KVM host's storage pool, as read by the last check.",
		poolLabelNames, nil)
	roundsTotal = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "check_rounds_total"),
		"Rounds of provider checks completed since the exporter started.",
		nil, nil)
	roundDuration = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "check_round_duration_seconds"),
		"How long the last completed round of provider checks took.",
		nil, nil)
	abandonedTotal = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "provider", "checkers_abandoned_total"),
		"Checkers that had not returned by a round's deadline and were abandoned (their targets read Timeout).",
		nil, nil)

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
