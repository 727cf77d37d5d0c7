package checks

import (
	"context"
	"slices"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks/shard"
)

// Ownership says whether this replica owns the ownership key (OwnershipKey) of a target: it
// checks and reports the targets it owns only. The exporter builds it from the members of the
// shard (--shard.enabled); nil owns everything, as without sharding.
type Ownership func(key string) bool

// Carried is a target's verdict and consecutive counts as the replica that checked it before
// published them: a sharded replica that takes a target over goes on from them, so that a
// handover neither restarts failureThreshold/successThreshold nor moves Since. The new owner
// still publishes the target only after its own first check.
type Carried struct {
	Up                   bool
	Reason               Reason
	Message              string
	Since, CheckedAt     time.Time
	ConsecutiveFailures  int
	ConsecutiveSuccesses int
}

// Carrier returns the Carried state of provider's target, if another replica published one.
type Carrier func(provider, target string) (Carried, bool)

// PerTarget reports whether typ's targets are owned one by one (Type.PerTarget) rather than
// the provider whole.
func PerTarget(typ ProviderType) bool {
	t, ok := Lookup(typ)
	return ok && t.PerTarget
}

// OwnershipKey is the key by which replicas share target of provider (of type typ): the
// provider's name for a type owned whole, provider and target for a PerTarget type.
func OwnershipKey(provider string, typ ProviderType, target string) string {
	return shard.Key(provider, target, PerTarget(typ))
}

// SetOwnership makes the runner check and publish only the targets owns accepts, from the next
// round on (nil: every target). A target it stops owning leaves the snapshot, its counts and
// history with it, at that round; one it starts owning is listed without a verdict until its
// first checks meet a threshold, like a target a reload adds, so a new owner never reports
// before it has checked.
func (r *Runner) SetOwnership(owns Ownership) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owns = owns
}

// SetCarrier makes the runner ask carry for the state of each target a round lists for the
// first time (one it starts owning), and go on from it (Carried).
func (r *Runner) SetCarrier(carry Carrier) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.carry = carry
}

// owned returns the targets of s that owns accepts (all of them when owns is nil), and whether
// the checker is to be called at all: a provider owned whole is called only by its owner
// (whatever targets it lists yet: vsphere discovers its hosts in its check), a PerTarget one
// whenever it has a target this replica owns, or none at all; a SubsetChecker every round, with
// no target when it owns none, so that it lets go of what it holds for the targets it no longer
// owns (kvm's pooled links).
func owned(owns Ownership, s *slot, targets []string) (mine []string, call bool) {
	if owns == nil {
		return targets, true
	}
	if !PerTarget(s.typ) {
		if owns(shard.Key(s.name, "", false)) {
			return targets, true
		}
		return nil, false
	}
	mine = slices.DeleteFunc(slices.Clone(targets), func(t string) bool { return !owns(shard.Key(s.name, t, true)) })
	_, subset := s.c.(SubsetChecker)
	return mine, len(mine) > 0 || len(targets) == 0 || subset
}

// checkOwned runs s's check of mine, the targets it owns of all (the checker's Targets()).
func checkOwned(ctx context.Context, c Checker, all, mine []string) []TargetResult {
	if len(mine) == len(all) {
		return c.Check(ctx)
	}
	if sc, ok := c.(SubsetChecker); ok {
		return sc.CheckTargets(ctx, mine)
	}
	keep := make(map[string]bool, len(mine))
	for _, t := range mine {
		keep[t] = true
	}
	return slices.DeleteFunc(c.Check(ctx), func(r TargetResult) bool { return !keep[r.Target] })
}
