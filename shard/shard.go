// Package shard shares the targets between the replicas of a deployment (--shard.enabled):
// one constructor (New), which package main calls, and one seam each for the runner and the
// ProviderHealth writer.
//
//   - Membership (membership.go): each replica holds a Lease of its own; the members are the
//     Leases seen renewed. Each publishes its verdicts (its part) in a ProviderHealthPart
//     object and reads the others'.
//   - Ownership and handover (this file): a replica checks the targets it owns among the
//     members (rendezvous hashing, checks/shard), keeps those it hands over until their new
//     owner reports them, and goes on from the counts the others published (carry). The runner
//     sees it as its checks.Ownership and checks.Carrier, which New installs.
//   - Parts (part.go): a replica's verdicts, encoded, and the others', decoded and checked
//     against this replica's configuration.
//   - The fleet (fleet.go): this replica's snapshot folded with the others' parts, the source of
//     the ProviderHealth writer (Fleet).
//
// The exporter sees none of it: main gives it Ready as a readiness hook.
package shard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	rendezvous "github.com/provider-health-exporter/provider-health-exporter/checks/shard"
)

// handoverIntervals is how many intervals at most a replica keeps checking and reporting a
// target it stopped owning: the new owner reports it only after its first verdict (one round
// at most an interval away), so the old one keeps it until it reads the new owner's verdict in
// its part (setParts), or this long. Duplicates during a handover are allowed; gaps are not.
const handoverIntervals = 2

// staleIntervals is how old, in intervals, a verdict another replica published may be for a
// new owner to go on from its counts (carry).
const staleIntervals = 3

// Runner is what the shard needs of the round runner (*checks.Runner): its snapshots, a round
// at once when targets come to this replica, and the seams New installs (SetOwnership,
// SetCarrier).
type Runner interface {
	Current() *checks.Snapshot
	Subscribe(ctx context.Context) <-chan struct{}
	RunSoon()
	SetOwnership(owns checks.Ownership)
	SetCarrier(carry checks.Carrier)
}

// Options configure a Shard.
type Options struct {
	// Config is the client configuration of the cluster holding the Leases and parts.
	Config *rest.Config
	// Namespace of the Leases and parts; Identity names this replica's; Instance is the label
	// value that groups a deployment's.
	Namespace, Identity, Instance string
	// LeaseDuration, RenewDeadline and RetryPeriod time the Leases (MembershipOptions); zero:
	// the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
	// Owner, when set (in a pod: the pod), owns the Lease and the part.
	Owner *metav1.OwnerReference
	// Runner runs the rounds; New makes it check only the targets this replica owns.
	Runner Runner
	// Checkers returns the configured checkers, owned or not (the exporter's, after its last
	// load): the providers, their types and targets the others' parts are checked against.
	Checkers func() []checks.Checker
	// Interval is the time between two rounds (--provider-check-interval; 0: checks off).
	Interval time.Duration
	// Working, when set, says whether this replica's rounds work (MembershipOptions.Working):
	// an error releases its Lease until they do again.
	Working func() error
	// Registerer, when set, registers the shard's metrics.
	Registerer prometheus.Registerer
}

// Shard is a sharded replica: its membership, the targets it owns and hands over, and the
// others' parts. Build it with New, Join it, Run it; Release and Delete it at exit.
type Shard struct {
	m        *Membership
	runner   Runner
	checkers func() []checks.Checker
	self     string
	interval time.Duration
	now      func() time.Time
	logger   *slog.Logger

	mu      sync.Mutex
	members []string
	// leaving holds the keys this replica owned before the last change of members, and until
	// when it keeps them; leavingUntil is the latest of those times.
	leaving      map[string]time.Time
	leavingUntil time.Time
	// parts are the other replicas' parts, by identity, as the last read of the Leases found
	// them (setParts); guarded by mu.
	parts map[string]*memberPart

	// runSoon asks the runner for a round at once (Runner.RunSoon).
	runSoon    func()
	handovers  *prometheus.CounterVec
	owned      *prometheus.Desc
	configured *prometheus.Desc

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

// New returns the Shard of o.Identity and makes o.Runner check and report only the targets it
// owns among the members: none until Join has read them. It registers the shard's metrics; it
// contacts nothing until Join or Run.
func New(o Options) (*Shard, error) {
	if o.Runner == nil || o.Checkers == nil {
		return nil, errors.New("shard: a runner and its checkers are needed")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Shard{
		runner:   o.Runner,
		checkers: o.Checkers,
		self:     o.Identity,
		interval: o.Interval,
		now:      time.Now,
		logger:   o.Logger,
		leaving:  map[string]time.Time{},
		parts:    map[string]*memberPart{},
		runSoon:  o.Runner.RunSoon,
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
	m, err := NewMembership(MembershipOptions{
		Config:        o.Config,
		Namespace:     o.Namespace,
		Identity:      o.Identity,
		Instance:      o.Instance,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		Logger:        o.Logger,
		Owner:         o.Owner,
		OnChange:      s.setMembers,
		Part:          s.publication,
		OnParts:       s.setParts,
		Follow:        s.following,
		Working:       o.Working,
	})
	if err != nil {
		return nil, err
	}
	s.m = m
	s.handovers.WithLabelValues("in")
	s.handovers.WithLabelValues("out")
	if o.Registerer != nil {
		partMax := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace, Subsystem: "shard", Name: "part_max_bytes",
			Help: "The most a replica's part may hold (its ProviderHealthPart's data, compressed); past it, messages and then verdicts are left out.",
		}, func() float64 { return MaxPart })
		for _, c := range append(m.Collectors(), s.handovers, s, s.partBytes, s.unpublished, partMax) {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("shard: registering its metrics: %w", err)
			}
		}
	}
	o.Runner.SetOwnership(s.owns)
	o.Runner.SetCarrier(s.carry)
	return s, nil
}

// Join renews this replica's Lease and reads the members once, within the renew deadline,
// before the runner starts (Membership.Join): a new replica then begins with the members the
// API server lists, and checks only its share. On an error it has not joined: it owns nothing,
// and is not Ready, until Run succeeds. The others' parts are read as it takes its share over
// (setMembers), then as following asks.
func (s *Shard) Join(ctx context.Context) error {
	err := s.m.Join(ctx)
	s.mu.Lock()
	s.members = s.m.Members()
	s.mu.Unlock()
	s.setParts(s.m.Parts())
	return err
}

// Run follows the members and the others' parts and publishes this replica's, until ctx is
// done (Membership.Run); Release and Delete are the caller's, after.
func (s *Shard) Run(ctx context.Context) { s.m.Run(ctx) }

// Release lets go of this replica's Lease, so that the others take its targets over at their
// next read (Membership.Release); call it once Run has returned.
func (s *Shard) Release(ctx context.Context) error { return s.m.Release(ctx) }

// Delete deletes this replica's Lease and part (Membership.Delete): at the end of its exit,
// once the others have read its part.
func (s *Shard) Delete(ctx context.Context) { s.m.Delete(ctx) }

// Ready is the exporter's readiness hook: an error while this replica has not read the members
// once (it checks nothing until it has).
func (s *Shard) Ready() error {
	if !s.m.Joined() {
		return errors.New("sharded, and the members of the shard could not be read yet: checking nothing until they are")
	}
	return nil
}

// publication is this replica's part, to publish in its ProviderHealthPart
// (MembershipOptions.Part): the verdicts of its current snapshot, encoded once per snapshot;
// nothing before the first round.
func (s *Shard) publication() Publication {
	snap := s.runner.Current()
	if snap.Round == 0 {
		return Publication{}
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if snap != s.pubSnap {
		enc := encodePart(snap, MaxPart)
		if enc.left > 0 && s.pubLeft == 0 {
			s.logger.Warn("this replica's part cannot hold every verdict it reports: some are left out, and the ProviderHealth objects show them as not reported; run more replicas",
				"left_out", enc.left, "max_bytes", MaxPart)
		}
		s.pubSnap, s.pubEnc, s.pubLeft = snap, enc, enc.left
		s.partBytes.Set(float64(len(enc.data)))
		s.unpublished.Set(float64(enc.left))
	}
	return Publication{
		Data: s.pubEnc.data, Verdicts: s.pubEnc.verdicts, Key: s.pubEnc.key,
		CheckedAt: snap.RoundStarted.Add(snap.RoundDuration),
	}
}

// setParts is called with the other replicas' parts whenever one of them or the members
// changed (MembershipOptions.OnParts). Only the parts of live members count, and those of
// members seen live within the carry window (staleIntervals intervals): a part of a Lease never
// seen live, or of none, never does. Each is checked against this replica's configuration
// (partReader). A target this replica hands over stops being reported here as soon as its new
// owner's part has it; the fleet's subscribers are told.
func (s *Shard) setParts(parts []Part) {
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
			r = s.partReader(now)
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
		owner := rendezvous.Owner(s.members, k)
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
func (s *Shard) partReader(now time.Time) *partReader {
	cs := s.checkers()
	r := &partReader{providers: make(map[string]configuredProvider, len(cs)), now: now}
	for _, c := range cs {
		typ := c.Type()
		cp := configuredProvider{typ: typ, reasons: map[checks.Reason]bool{}}
		for _, reason := range checks.Reasons(typ) {
			cp.reasons[reason] = true
		}
		targets := c.Targets()
		if checks.PerTarget(typ) {
			cp.targets = make(map[string]bool, len(targets))
			for _, t := range targets {
				cp.targets[t] = true
			}
			r.maxVerdicts += len(targets)
		} else {
			r.maxVerdicts += maxWholeTargets
		}
		r.providers[c.Name()] = cp
	}
	return r
}

// carry is the runner's checks.Carrier: the newest verdict another replica published on the
// target, if it is not older than staleIntervals intervals.
func (s *Shard) carry(provider, target string) (checks.Carried, bool) {
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
func (s *Shard) notifyFleet() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for ch := range s.fleetSubs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// setMembers is called with the members whenever they change (MembershipOptions.OnChange):
// the targets whose owner moves away from this replica are kept for handoverIntervals, and the
// moves are counted. When targets come to this replica a round runs at once (Runner.RunSoon),
// so that a replica that left (SIGTERM) or joined hands its targets over within a round, not
// an interval and a round.
func (s *Shard) setMembers(members []string) {
	var keys []string
	seen := map[string]bool{}
	for _, c := range s.checkers() {
		typ := c.Type()
		targets := c.Targets()
		if !checks.PerTarget(typ) {
			targets = []string{""}
		}
		for _, t := range targets {
			k := checks.OwnershipKey(c.Name(), typ, t)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	if s.moveKeys(members, keys) {
		// The round that lists them goes on from the verdicts their last owner published
		// (carry): read the parts first, within half the renew deadline, as the next renewal
		// waits for it.
		ctx, cancel := context.WithTimeout(context.Background(), s.m.o.RenewDeadline/2)
		if err := s.m.Refresh(ctx); err != nil {
			s.logger.Warn("cannot read the other members' parts: the targets this replica takes over start without their last verdicts", "err", err)
		}
		cancel()
		s.runSoon()
	} else if s.handingOver() {
		// The new owners' parts say when they report the targets handed over: bring the parts
		// held up to date, then the watch follows them.
		ctx, cancel := context.WithTimeout(context.Background(), s.m.o.RenewDeadline/2)
		_ = s.m.Refresh(ctx)
		cancel()
	}
	// The owners changed: so may the fleet folded from the same parts.
	s.notifyFleet()
}

// moveKeys records the new members, and reports whether keys came to this replica.
func (s *Shard) moveKeys(members, keys []string) (gained bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, until := range s.leaving {
		if !now.Before(until) {
			delete(s.leaving, k)
		}
	}
	for _, k := range keys {
		before, after := rendezvous.Owner(s.members, k) == s.self, rendezvous.Owner(members, k) == s.self
		switch {
		case before && !after:
			s.leaving[k] = now.Add(handoverIntervals * s.interval)
			s.leavingUntil = s.leaving[k]
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

// following says whether this replica needs the others' parts as they change
// (MembershipOptions.Follow): while the ProviderHealth writer folds the fleet (it subscribed to
// Fleet), and while it hands targets over (their new owners' parts end the handover). The
// others read parts only when they take targets over: at steady state a part's change is read
// by one replica, not by every member.
func (s *Shard) following() bool {
	s.subsMu.Lock()
	subscribed := len(s.fleetSubs) > 0
	s.subsMu.Unlock()
	return subscribed || s.handingOver()
}

// handingOver says whether this replica keeps targets it no longer owns until their new owners
// report them.
func (s *Shard) handingOver() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leaving) > 0 && s.now().Before(s.leavingUntil)
}

// owns is the runner's checks.Ownership.
func (s *Shard) owns(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rendezvous.Owner(s.members, key) == s.self {
		return true
	}
	until, ok := s.leaving[key]
	return ok && s.now().Before(until)
}

// Describe and Collect serve proxy_operator_shard_owned_targets from the current snapshot, and
// proxy_operator_shard_configured_targets from the configuration.
func (s *Shard) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.owned
	ch <- s.configured
}

func (s *Shard) Collect(ch chan<- prometheus.Metric) {
	for _, p := range s.runner.Current().Providers {
		ch <- prometheus.MustNewConstMetric(s.owned, prometheus.GaugeValue, float64(len(p.Targets)+len(p.Unchecked)), p.Name)
	}
	for _, c := range s.checkers() {
		ch <- prometheus.MustNewConstMetric(s.configured, prometheus.GaugeValue, float64(len(c.Targets())), c.Name())
	}
}
