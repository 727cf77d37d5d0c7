package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	rendezvous "github.com/provider-health-exporter/provider-health-exporter/checks/shard"
)

// Fleet is the source of the ProviderHealth writer (crdwriter.Source) of a sharded replica:
// snapshots of the whole fleet, this replica's verdicts folded with the parts the other
// members publish.
type Fleet struct{ s *Shard }

// Fleet returns the writer's source.
func (s *Shard) Fleet() *Fleet { return &Fleet{s: s} }

// Subscribe tells after each snapshot of the runner and each read of the others' parts. A
// subscriber folds the fleet: from now on the replica follows the others' parts as they change
// (following), and it reads them once before Subscribe returns, so that the first fold has
// them.
func (f *Fleet) Subscribe(ctx context.Context) <-chan struct{} {
	s := f.s
	ch := make(chan struct{}, 1)
	s.subsMu.Lock()
	s.fleetSubs[ch] = struct{}{}
	s.subsMu.Unlock()
	if err := s.m.Refresh(ctx); err != nil && ctx.Err() == nil {
		s.logger.Warn("cannot read the other members' parts yet: their targets read as not reported until they are read; retrying every retry period", "err", err)
		go func() {
			for s.m.Refresh(ctx) != nil && ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-time.After(s.m.o.RetryPeriod):
				}
			}
		}()
	}
	runner := s.runner.Subscribe(ctx)
	go func() {
		for range runner {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		s.subsMu.Lock()
		defer s.subsMu.Unlock()
		delete(s.fleetSubs, ch)
		close(ch)
	}()
	return ch
}

// Current folds this replica's snapshot with the others' parts: each target from the part of
// its owner (shard.Owner over the members this replica sees), or, while its owner has not
// reported it yet (a handover; a member killed, whose Lease expired), from whichever replica's
// verdict is the newest, that of a replica gone included (its verdicts age and turn stale as
// any); a target nobody reports is listed without a verdict. Round and the providers'
// configuration are this replica's.
func (f *Fleet) Current() *checks.Snapshot {
	s := f.s
	local := s.runner.Current()
	configured := s.configuredTargetNames()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := *local
	out.Providers = make([]checks.ProviderState, len(local.Providers))
	for i := range local.Providers {
		out.Providers[i] = s.foldProvider(&local.Providers[i], configured[local.Providers[i].Name])
	}
	return &out
}

// foldProvider is local's provider with the fleet's verdicts. s.mu must be held.
func (s *Shard) foldProvider(local *checks.ProviderState, targets []string) checks.ProviderState {
	out := *local
	out.Targets, out.Unchecked = nil, nil
	mine := make(map[string]*checks.TargetState, len(local.Targets))
	for i := range local.Targets {
		mine[local.Targets[i].Target] = &local.Targets[i]
	}
	if !checks.PerTarget(local.Type) {
		owner := rendezvous.Owner(s.members, rendezvous.Key(local.Name, "", false))
		if owner == s.self && len(local.Targets) > 0 {
			return *local
		}
		// The owner's part, else (a handover) the newest: the one checked last.
		var best *memberPart
		bestAt := time.Time{}
		if mp := s.parts[owner]; owner != s.self && mp != nil && mp.live && mp.p.reports(local.Name, local.Type) {
			best, bestAt = mp, farFuture
		}
		for _, mp := range s.parts {
			if mp.p.reports(local.Name, local.Type) && mp.p.checkedAt.After(bestAt) {
				best, bestAt = mp, mp.p.checkedAt
			}
		}
		if len(local.Targets) > 0 && !newestLocal(local).Before(bestAt) {
			return *local
		}
		if best == nil && owner == s.self {
			// This replica owns it and has not checked it yet: as its runner lists it.
			return *local
		}
		if best == nil {
			// Nobody reports it yet: its owner has not checked it since it came to it.
			for _, t := range targets {
				out.Unchecked = append(out.Unchecked, checks.UncheckedTarget{
					Target: t, Message: fmt.Sprintf("not reported yet by the replica that owns it (%s)", owner),
				})
			}
			return out
		}
		v := best.p.providers[local.Name]
		for _, t := range v.order {
			out.Targets = append(out.Targets, v.targets[t].state(best.p.checkedAt))
		}
		return out
	}
	unchecked := make(map[string]checks.UncheckedTarget, len(local.Unchecked))
	for _, u := range local.Unchecked {
		unchecked[u.Target] = u
	}
	if targets == nil {
		// A reload removed the provider since the snapshot: the targets the snapshot lists.
		for i := range local.Targets {
			targets = append(targets, local.Targets[i].Target)
		}
		for _, u := range local.Unchecked {
			targets = append(targets, u.Target)
		}
	}
	// The fleet's targets, allocated once (the fold runs at each change of the fleet); one
	// message per owner for the targets it has not reported yet.
	out.Targets = make([]checks.TargetState, 0, len(targets))
	notYet := map[string]string{}
	for _, t := range targets {
		owner := rendezvous.Owner(s.members, rendezvous.Key(local.Name, t, true))
		var chosen *checks.TargetState
		if owner == s.self {
			chosen = mine[t]
		} else if mp := s.parts[owner]; mp != nil && mp.live {
			if v := mp.p.verdict(local.Name, local.Type, t); v != nil {
				st := v.state(mp.p.checkedAt)
				chosen = &st
			}
		}
		if chosen == nil {
			chosen = mine[t]
			for _, mp := range s.parts {
				if v := mp.p.verdict(local.Name, local.Type, t); v != nil && (chosen == nil || mp.p.checkedAt.After(chosen.CheckedAt)) {
					st := v.state(mp.p.checkedAt)
					chosen = &st
				}
			}
		}
		switch u, ok := unchecked[t]; {
		case chosen != nil:
			out.Targets = append(out.Targets, *chosen)
		case ok && owner == s.self:
			out.Unchecked = append(out.Unchecked, u)
		default:
			msg, ok := notYet[owner]
			if !ok {
				msg = fmt.Sprintf("not reported yet by the replica that owns it (%s)", owner)
				notYet[owner] = msg
			}
			out.Unchecked = append(out.Unchecked, checks.UncheckedTarget{Target: t, Message: msg})
		}
	}
	return out
}

// farFuture ranks the owner's own part above any other during a handover.
var farFuture = time.Unix(1<<40, 0)

// reports says whether p has verdicts on provider, of type typ.
func (p *part) reports(provider string, typ checks.ProviderType) bool {
	v := p.providers[provider]
	return v != nil && v.typ == typ && len(v.order) > 0
}

// newestLocal is the newest check time among p's verdicts.
func newestLocal(p *checks.ProviderState) time.Time {
	var n time.Time
	for i := range p.Targets {
		if at := p.Targets[i].CheckedAt; at.After(n) {
			n = at
		}
	}
	return n
}

// configuredTargetNames returns the configured targets of each provider, owned or not.
func (s *Shard) configuredTargetNames() map[string][]string {
	cs := s.checkers()
	out := make(map[string][]string, len(cs))
	for _, c := range cs {
		out[c.Name()] = c.Targets()
	}
	return out
}
