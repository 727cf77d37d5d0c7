package crdwriter

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// Kinds of writes the writer counts.
const (
	writeCreate = "create"
	writeStatus = "status"
	writeDelete = "delete"
	writeEvent  = "event"
)

// Results of writes the writer counts.
const (
	resultSuccess  = "success"
	resultConflict = "conflict"
	resultError    = "error"
	// resultRejected: the API server refused the object as invalid (422); that provider's
	// own problem, never a reason to back off.
	resultRejected = "rejected"
)

// Problems of the installed CRD the writer reports (label problem of crd_mismatch).
const (
	mismatchNoStatus = "no_status_subresource"
	mismatchPruned   = "fields_pruned"
)

// metrics are the writer's own metrics, documented in docs/crd.md and docs/metrics.md.
type metrics struct {
	writes       *prometheus.CounterVec
	lastSuccess  prometheus.Gauge
	leader       prometheus.Gauge
	nameClashes  prometheus.Gauge
	syncedRound  prometheus.Gauge
	rejected     prometheus.Gauge
	failing      prometheus.Gauge
	otherWriters prometheus.Counter
	// eventsDropped counts the Events not recorded, by cause.
	eventsDropped *prometheus.CounterVec
	crdMismatch   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "writes_total",
			Help: "Writes of the ProviderHealth writer to the Kubernetes API, by kind (create, status, delete, event) and result (success, conflict, error, rejected).",
		}, []string{"kind", "result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "last_success_timestamp_seconds",
			Help: "When the ProviderHealth writer last wrote to the Kubernetes API successfully, in seconds since the epoch.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "leader",
			Help: "1 when this replica's ProviderHealth writer is writing (holds the lease, or runs without leader election), else 0.",
		}),
		nameClashes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "name_clashes",
			Help: "Configured providers whose ProviderHealth object name is held by an object of another exporter instance (or not managed by the exporter); those objects are left alone.",
		}),
		syncedRound: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "synced_round",
			Help: "The round of the newest snapshot the ProviderHealth writer has fully mirrored into the Kubernetes API (compare with " + prometheus.BuildFQName(checks.MetricNamespace, "provider", "check_rounds_total") + ": a gap means the writer lags).",
		}),
		rejected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "rejected_objects",
			Help: "Configured providers whose ProviderHealth object or status the API server refuses as invalid (422); the other providers are written as usual.",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "failing_objects",
			Help: "Configured providers whose ProviderHealth object the API server refuses to write for a reason of that object (denied by an admission policy, too large, a server error, a conflict that persists); each is retried with its own backoff, the other providers are written as usual.",
		}),
		otherWriters: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "other_writer_writes_total",
			Help: "Statuses of this instance's ProviderHealth objects found written by another exporter process of the same identity after this writer wrote them: two writers with one identity overwrite each other (replicas without --crd.leader-elect, or two deployments with the same instance and Lease).",
		}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "events_dropped_total",
			Help: "Target transitions not recorded as Kubernetes Events, by cause: target_budget (the target spent its Event budget: 10, then one per 5 minutes), provider_cap (more than 64 Events of one provider waited for one write). The status still shows every verdict.",
		}, []string{"cause"}),
		crdMismatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "crd_writer", Name: "crd_mismatch",
			Help: "1 while the installed ProviderHealth CRD does not fit this writer, by problem: no_status_subresource (no status can be written), fields_pruned (the API server drops status fields the writer sets: an older CRD).",
		}, []string{"problem"}),
	}
	for _, c := range []string{dropTargetBudget, dropProviderCap} {
		m.eventsDropped.WithLabelValues(c)
	}
	for _, p := range []string{mismatchNoStatus, mismatchPruned} {
		m.crdMismatch.WithLabelValues(p)
	}
	for _, kind := range []string{writeCreate, writeStatus, writeDelete, writeEvent} {
		for _, result := range []string{resultSuccess, resultConflict, resultError, resultRejected} {
			m.writes.WithLabelValues(kind, result)
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.writes, m.lastSuccess, m.leader, m.nameClashes, m.syncedRound, m.rejected, m.failing, m.otherWriters, m.eventsDropped, m.crdMismatch} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// count records one write and its outcome.
func (m *metrics) count(kind string, err error) {
	switch {
	case err == nil:
		m.writes.WithLabelValues(kind, resultSuccess).Inc()
		m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || errors.Is(err, errNotOurs):
		m.writes.WithLabelValues(kind, resultConflict).Inc()
	case apierrors.IsInvalid(err):
		m.writes.WithLabelValues(kind, resultRejected).Inc()
	default:
		m.writes.WithLabelValues(kind, resultError).Inc()
	}
}

// Causes of dropped Events (label cause of events_dropped_total).
const (
	dropTargetBudget = "target_budget"
	dropProviderCap  = "provider_cap"
)
