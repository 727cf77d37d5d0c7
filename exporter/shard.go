package exporter

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/shard"
	"github.com/provider-health-exporter/provider-health-exporter/membership"
)

// handoverIntervals is how many intervals at most a replica keeps checking and reporting a
// target it stopped owning: the new owner reports it only after its first verdict (one round
// at most an interval away), so the old one keeps it until it reads the new owner's verdict in
// its part (SetParts), or this long. Duplicates during a handover are allowed; gaps are not.
const handoverIntervals = 2

// staleIntervals is how old, in intervals, a verdict another replica published may be for a
// new owner to go on from its counts (carry).
const staleIntervals = 3

// sharding is a sharded replica's ownership (--shard.enabled): the members it sees, itself,
// and the targets it hands over. It is the runner's checks.Ownership.
type sharding struct {
	// joined reports whether the replica has read the members once (nil: it has).
	joined   func() bool
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
	logger  *slog.Logger

	// parts are the other replicas' parts, by identity, as the last read of the Leases found
	// them (SetParts); guarded by mu.
	parts map[string]*memberPart
	// published caches this replica's part of the last snapshot it encoded.
	pubMu       sync.Mutex
	pubSnap     *checks.Snapshot
	pubEnc      encodedPart
	pubLeft     int // verdicts left out of pubEnc (logged when it turns above 0)
	partBytes   prometheus.Gauge
	unpublished prometheus.Gauge
	// fleetSubs are the subscribers of the fleet's snapshots (Fleet), told when parts change.
	subsMu    sync.Mutex
	fleetSubs map[chan struct{}]struct{}
}

// memberPart is another replica's part: a digest of its data as read, whether the replica is
// a member, and the data decoded and checked.
type memberPart struct {
	digest [sha256.Size]byte
	live   bool
	p      *part
}

// EnableSharding makes the replica check and report only the targets it owns among members
// (checks/shard), from the next round on: none while members is empty (it has not read them
// yet), and then it is not ready either while joined (when set) says it has not joined. It
// registers the shard's metrics. Call it once, before the runner starts; SetMembers follows
// the members' changes.
func (e *Exporter) EnableSharding(self string, members []string, joined func() bool) {
	s := &sharding{
		joined:   joined,
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
		logger:  e.logger,
		parts:   map[string]*memberPart{},
		partBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "shard", Name: "part_bytes",
			Help: "Size of this replica's part (its verdicts, compressed), as it last encoded it for its ProviderHealthPart: at most proxy_operator_shard_part_max_bytes.",
		}),
		unpublished: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "shard", Name: "unpublished_targets",
			Help: "Verdicts this replica reports but had to leave out of its part (it would exceed proxy_operator_shard_part_max_bytes): the ProviderHealth objects show them as not reported.",
		}),
		fleetSubs: map[chan struct{}]struct{}{},
	}
	s.handovers.WithLabelValues("in")
	s.handovers.WithLabelValues("out")
	e.shard = s
	partMax := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: checks.MetricNamespace, Subsystem: "shard", Name: "part_max_bytes",
		Help: "The most a replica's part may hold (its ProviderHealthPart's data, compressed); past it, messages and then verdicts are left out.",
	}, func() float64 { return membership.MaxPart })
	e.registry.MustRegister(s.handovers, s, s.partBytes, s.unpublished, partMax)
	e.runner.SetOwnership(s.owns)
	e.runner.SetCarrier(s.carry)
}

// ShardPart is this replica's part, to publish in its ProviderHealthPart
// (membership.Options.Part): the verdicts of its current snapshot, encoded once per snapshot;
// nothing before EnableSharding or the first round.
func (e *Exporter) ShardPart() membership.Publication {
	s := e.shard
	if s == nil {
		return membership.Publication{}
	}
	snap := s.current()
	if snap.Round == 0 {
		return membership.Publication{}
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if snap != s.pubSnap {
		enc := encodePart(snap, membership.MaxPart)
		if enc.left > 0 && s.pubLeft == 0 {
			s.logger.Warn("this replica's part cannot hold every verdict it reports: some are left out, and the ProviderHealth objects show them as not reported; run more replicas",
				"left_out", enc.left, "max_bytes", membership.MaxPart)
		}
		s.pubSnap, s.pubEnc, s.pubLeft = snap, enc, enc.left
		s.partBytes.Set(float64(len(enc.data)))
		s.unpublished.Set(float64(enc.left))
	}
	return membership.Publication{
		Data: s.pubEnc.data, Verdicts: s.pubEnc.verdicts, Key: s.pubEnc.key,
		CheckedAt: snap.RoundStarted.Add(snap.RoundDuration),
	}
}

// SetParts is called with the other replicas' parts whenever one of them or the members
// changed (membership.Options.OnParts). Only the parts of live members count, and those of
// members seen live within the carry window (staleIntervals intervals): a part of a Lease never
// seen live, or of none, never does. Each is checked against this replica's configuration
// (partReader). A target this replica hands over stops being reported here as soon as its new
// owner's part has it; the fleet's subscribers are told.
func (e *Exporter) SetParts(parts []membership.Part) {
	s := e.shard
	now := s.now()
	// What the parts are checked against (every configured target): built only when a part
	// changed, not at each of the members' reads, which call this too.
	var r *partReader
	s.mu.Lock()
	old := s.parts
	s.mu.Unlock()
	next := make(map[string]*memberPart, len(parts))
	for _, mp := range parts {
		if !mp.Live && (mp.LastLive.IsZero() || now.Sub(mp.LastLive) > staleIntervals*s.interval) {
			continue
		}
		checkedAt := mp.CheckedAt
		if mp.RoundAt.After(checkedAt) {
			checkedAt = mp.RoundAt
		}
		if checkedAt.After(now.Add(maxPartSkew)) {
			// A clock far ahead, or a lie: not newer than anything checked here.
			checkedAt = time.Time{}
		}
		digest := sha256.Sum256(mp.Data)
		if o := old[mp.Identity]; o != nil && o.digest == digest && o.p != nil {
			p := *o.p
			p.checkedAt = checkedAt
			next[mp.Identity] = &memberPart{digest: digest, live: mp.Live, p: &p}
			continue
		}
		if r == nil {
			r = e.partReader(now)
		}
		p, err := r.decodePart(mp.Data)
		if err != nil {
			s.logger.Warn("cannot read a shard member's part; its verdicts are not folded into the ProviderHealth objects", "member", mp.Identity, "err", err)
			continue
		}
		if p.rejected > 0 {
			s.logger.Warn("a shard member's part holds verdicts this replica does not take (unknown provider, target or reason, a count below 0, a time in the future)",
				"member", mp.Identity, "rejected", p.rejected)
		}
		p.checkedAt = checkedAt
		next[mp.Identity] = &memberPart{digest: digest, live: mp.Live, p: p}
	}
	s.mu.Lock()
	changed := !sameParts(s.parts, next)
	s.parts = next
	for k := range s.leaving {
		owner := shard.Owner(s.members, k)
		if mp := next[owner]; owner != s.self && mp != nil && mp.live && mp.p.keys[k] {
			delete(s.leaving, k)
		}
	}
	s.mu.Unlock()
	if changed {
		// The fleet's subscribers (the ProviderHealth writer folds the whole fleet for each
		// notice) are told of a change, not of every read of the members that found none.
		s.notifyFleet()
	}
}

// sameParts says whether a and b hold the same parts, live or not, checked at the same time:
// the fleet folded from either is the same.
func sameParts(a, b map[string]*memberPart) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		y := b[id]
		if y == nil || x.digest != y.digest || x.live != y.live || !x.p.checkedAt.Equal(y.p.checkedAt) {
			return false
		}
	}
	return true
}

// partReader is what this replica checks the others' parts against: its configured providers
// and targets, and their reasons.
func (e *Exporter) partReader(now time.Time) *partReader {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &partReader{providers: make(map[string]configuredProvider, len(e.entries)), now: now}
	for name, en := range e.entries {
		typ := en.checker.Type()
		cp := configuredProvider{typ: typ, reasons: map[checks.Reason]bool{}}
		for _, reason := range checks.Reasons(typ) {
			cp.reasons[reason] = true
		}
		targets := en.checker.Targets()
		if checks.PerTarget(typ) {
			cp.targets = make(map[string]bool, len(targets))
			for _, t := range targets {
				cp.targets[t] = true
			}
			r.maxVerdicts += len(targets)
		} else {
			r.maxVerdicts += maxWholeTargets
		}
		r.providers[name] = cp
	}
	return r
}

// carry is the runner's checks.Carrier: the newest verdict another replica published on the
// target, if it is not older than staleIntervals intervals.
func (s *sharding) carry(provider, target string) (checks.Carried, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *partLine
	var bestAt time.Time
	for _, mp := range s.parts {
		v := mp.p.providers[provider]
		if v == nil {
			continue
		}
		if t := v.targets[target]; t != nil && (best == nil || mp.p.checkedAt.After(bestAt)) {
			best, bestAt = t, mp.p.checkedAt
		}
	}
	if best == nil || s.now().Sub(bestAt) > staleIntervals*s.interval {
		return checks.Carried{}, false
	}
	return best.carried(bestAt), true
}

// notifyFleet tells the fleet's subscribers that it may have changed.
func (s *sharding) notifyFleet() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for ch := range s.fleetSubs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
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
	// The owners changed: so may the fleet folded from the same parts.
	e.shard.notifyFleet()
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

// ShardWorking is the membership's Options.Working: an error when this replica's rounds are
// wedged, its last round having started longer ago than two intervals plus the timeout (the
// limit of readiness), so that it releases its Lease and its share moves to the others.
func (e *Exporter) ShardWorking() error {
	if !e.ChecksOn() {
		return nil
	}
	ns := e.roundStarted.Load()
	if ns == 0 {
		// No round has started yet: the replica is starting.
		return nil
	}
	now := time.Now()
	started := time.Unix(0, ns)
	if late := now.Sub(started); late > e.stalledAfter() {
		return fmt.Errorf("no round of checks has started for %s (the last started at %s; one starts every %s)",
			late.Round(time.Second), started.UTC().Format(time.RFC3339), e.interval)
	}
	return nil
}
