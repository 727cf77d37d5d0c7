package exporter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/shard"
)

// handoverIntervals is how many intervals a replica keeps checking and reporting a target it
// stopped owning: the new owner reports it only after its first verdict (one round at most an
// interval away), so the old one keeps it meanwhile. Duplicates during a handover are allowed;
// gaps are not.
const handoverIntervals = 2

// sharding is a sharded replica's ownership (--shard.enabled): the members it sees, itself,
// and the targets it hands over. It is the runner's checks.Ownership.
type sharding struct {
	self     string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	members []string
	// leaving holds the keys this replica owned before the last change of members, and until
	// when it keeps them.
	leaving map[string]time.Time

	handovers  *prometheus.CounterVec
	owned      *prometheus.Desc
	configured *prometheus.Desc
	current    func() *checks.Snapshot
	// targets returns the configured targets of each provider, owned or not.
	targets func() map[string]int
	// runSoon asks the runner for a round at once (Runner.RunSoon).
	runSoon func()
}

// EnableSharding makes the replica check and report only the targets it owns among members
// (checks/shard), from the next round on; self must be among members. It registers the shard's
// metrics. Call it once, before the runner starts; SetMembers follows the members' changes.
func (e *Exporter) EnableSharding(self string, members []string) {
	s := &sharding{
		self:     self,
		interval: e.interval,
		now:      time.Now,
		members:  members,
		leaving:  map[string]time.Time{},
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: checks.MetricNamespace, Subsystem: "shard", Name: "handovers_total",
			Help: "Ownership keys (a provider owned whole, or one target of a per-target provider) that moved to this replica (direction in) or away from it (out) as the members changed.",
		}, []string{"direction"}),
		owned: prometheus.NewDesc(prometheus.BuildFQName(checks.MetricNamespace, "shard", "owned_targets"),
			"Targets of the provider this replica checks and reports now: those it owns, and those it hands over until their new owner has reported them. For a provider owned whole, above 0 on the one replica that speaks for it.",
			[]string{"provider"}, nil),
		configured: prometheus.NewDesc(prometheus.BuildFQName(checks.MetricNamespace, "shard", "configured_targets"),
			"Targets of the provider in this replica's configuration, owned or not: the fleet the replicas' owned targets must cover.",
			[]string{"provider"}, nil),
		current: e.runner.Current,
		targets: e.configuredTargets,
		runSoon: e.runner.RunSoon,
	}
	s.handovers.WithLabelValues("in")
	s.handovers.WithLabelValues("out")
	e.shard = s
	e.registry.MustRegister(s.handovers, s)
	e.runner.SetOwnership(s.owns)
}

// SetMembers is called with the members whenever they change: the targets whose owner moves
// away from this replica are kept for handoverIntervals, and the moves are counted. When
// targets come to this replica a round runs at once (Runner.RunSoon), so that a replica that
// left (SIGTERM) or joined hands its targets over within a round, not an interval and a round.
func (e *Exporter) SetMembers(members []string) {
	e.mu.Lock()
	var keys []string
	seen := map[string]bool{}
	for name, en := range e.entries {
		typ := en.checker.Type()
		targets := en.checker.Targets()
		if !checks.PerTarget(typ) {
			targets = []string{""}
		}
		for _, t := range targets {
			k := checks.OwnershipKey(name, typ, t)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	e.mu.Unlock()
	if e.shard.setMembers(members, keys) {
		e.shard.runSoon()
	}
}

// setMembers records the new members, and reports whether keys came to this replica.
func (s *sharding) setMembers(members, keys []string) (gained bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, until := range s.leaving {
		if !now.Before(until) {
			delete(s.leaving, k)
		}
	}
	for _, k := range keys {
		before, after := shard.Owner(s.members, k) == s.self, shard.Owner(members, k) == s.self
		switch {
		case before && !after:
			s.leaving[k] = now.Add(handoverIntervals * s.interval)
			s.handovers.WithLabelValues("out").Inc()
		case !before && after:
			delete(s.leaving, k)
			s.handovers.WithLabelValues("in").Inc()
			gained = true
		}
	}
	s.members = members
	return gained
}

// configuredTargets returns the number of targets of each configured provider.
func (e *Exporter) configuredTargets() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := make(map[string]int, len(e.entries))
	for name, en := range e.entries {
		n[name] = len(en.checker.Targets())
	}
	return n
}

// owns is the runner's checks.Ownership.
func (s *sharding) owns(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if shard.Owner(s.members, key) == s.self {
		return true
	}
	until, ok := s.leaving[key]
	return ok && s.now().Before(until)
}

// Describe and Collect serve proxy_operator_shard_owned_targets from the current snapshot, and
// proxy_operator_shard_configured_targets from the configuration.
func (s *sharding) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.owned
	ch <- s.configured
}

func (s *sharding) Collect(ch chan<- prometheus.Metric) {
	for _, p := range s.current().Providers {
		ch <- prometheus.MustNewConstMetric(s.owned, prometheus.GaugeValue, float64(len(p.Targets)+len(p.Unchecked)), p.Name)
	}
	for name, n := range s.targets() {
		ch <- prometheus.MustNewConstMetric(s.configured, prometheus.GaugeValue, float64(n), name)
	}
}
