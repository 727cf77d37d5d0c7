package status

import (
	"fmt"
	"slices"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
)

// Source is what a Status is built from besides the snapshot and the filter.
type Source struct {
	// Version is the build's version; "" for a development build.
	Version string
	// Interval and Timeout are the rounds' (--provider-check-interval, 0: checks off, and
	// --provider-check-timeout).
	Interval, Timeout time.Duration
	// Writer is the ProviderHealth writer's report; nil without one.
	Writer *crdwriter.Report
	// HostFileProblems are the host files that do not read well now.
	HostFileProblems []HostFileProblem
}

// Build is the status of snapshot s under filter f: the providers it selects, those with down
// targets first, then those not checked yet, then the healthy ones, each group in the
// providers file's order; every selected provider on every page, its targets only on the pages
// whose window of PageRows rows holds them.
func Build(s *checks.Snapshot, f Filter, src Source) *Status {
	f.Page = max(f.Page, 1)
	st := &Status{
		Version:          src.Version,
		ChecksEnabled:    src.Interval > 0,
		Interval:         src.Interval.Seconds(),
		Timeout:          src.Timeout.Seconds(),
		Summary:          Summary{Providers: len(s.Providers)},
		Providers:        []Provider{},
		HostFileProblems: []HostFileProblem{},
		Filter:           f,
		AbandonedTotal:   s.AbandonedTotal,
	}
	if st.Version == "" {
		st.Version = "(development build)"
	}
	if s.Round > 0 {
		st.Round = &Round{Number: s.Round, Started: s.RoundStarted.UTC(), Duration: s.RoundDuration.Seconds()}
	}
	if src.Writer != nil {
		st.Writer = writerOf(*src.Writer)
	}
	st.HostFileProblems = append(st.HostFileProblems, src.HostFileProblems...)
	var down, unchecked, healthy []*builder
	for i := range s.Providers {
		ps := &s.Providers[i]
		st.AllProviders = append(st.AllProviders, ps.Name)
		b := newBuilder(ps, f)
		p := &b.p
		st.Summary.Targets += p.Total
		st.Summary.Ready += p.Ready
		st.Summary.Down += p.Total - p.Ready
		st.Summary.Maintenance += p.Maintenance
		st.Summary.Unchecked += p.Unchecked
		switch {
		case !p.Checked:
			st.Summary.UncheckedProviders++
		case p.Down > 0:
			st.Summary.DownProviders++
		}
		if f.Provider != "" && ps.Name != f.Provider {
			continue
		}
		switch {
		case f.Narrows() && p.Selected == 0 && b.selMaint == 0:
			continue
		case !p.Checked:
			unchecked = append(unchecked, b)
		case p.Down > 0:
			down = append(down, b)
		default:
			healthy = append(healthy, b)
		}
	}
	selected := slices.Concat(down, unchecked, healthy)
	st.Page = paginate(selected, f)
	for _, b := range selected {
		st.Providers = append(st.Providers, b.p)
	}
	return st
}

// builder builds one provider's part of a status.
type builder struct {
	p  Provider
	ps *checks.ProviderState
	f  Filter
	// selDown and selUp count the rows the filter selects: of its down targets unless state is
	// "up", of its ready ones unless state is "down" (with a reason filter, only those of that
	// reason); selMaint its targets in maintenance the filter selects (listed apart, not rows).
	selDown, selUp, selMaint int
	// down and up are its rows on the page.
	down, up []Target
}

// newBuilder summarizes provider ps under filter f; paginate fills in its rows on the page.
func newBuilder(ps *checks.ProviderState, f Filter) *builder {
	b := &builder{ps: ps, f: f}
	p := &b.p
	*p = Provider{Name: ps.Name, Type: string(ps.Type), Checked: len(ps.Targets) > 0, Total: len(ps.Targets), Unchecked: len(ps.Unchecked),
		Targets: []Target{}, UncheckedTargets: []Unchecked{}, MaintenanceTargets: []Target{}}
	for i := range ps.Unchecked {
		u := &ps.Unchecked[i]
		if len(p.UncheckedTargets) < NamesLimit {
			p.UncheckedTargets = append(p.UncheckedTargets, Unchecked{Name: u.Target, Listed: u.Listed.UTC(), Message: u.Message})
		}
		if i == 0 || u.Listed.Before(p.UncheckedListed) {
			p.UncheckedListed = u.Listed
		}
	}
	if p.RecentReady, p.RecentChecks = recentCounts(ps); p.RecentChecks > 0 {
		r := float64(p.RecentReady) / float64(p.RecentChecks)
		p.RecentReadyRatio = &r
	}
	if !p.Checked {
		return b
	}
	var lastChecked, firstDown, firstNotUp, lastFlip time.Time
	reasons := map[checks.Reason]int{}
	for i := range ps.Targets {
		t := &ps.Targets[i]
		if t.CheckedAt.After(lastChecked) {
			lastChecked = t.CheckedAt
		}
		if t.Since.After(lastFlip) {
			lastFlip = t.Since
		}
		if !t.Up && (firstNotUp.IsZero() || t.Since.Before(firstNotUp)) {
			firstNotUp = t.Since
		}
		matches := f.Matches(ps, t)
		if t.Up {
			p.Ready++
			if matches {
				b.selUp++
			}
			continue
		}
		if InMaintenance(t) {
			if f.State == "" && matches {
				b.selMaint++
				if len(p.MaintenanceTargets) < NamesLimit {
					p.MaintenanceTargets = append(p.MaintenanceTargets, targetOf(ps, t))
				}
			}
			if len(p.InMaintenance) < NamesLimit {
				p.InMaintenance = append(p.InMaintenance, TargetSince{Name: t.Target, Since: t.Since})
			}
			p.Maintenance++
			continue
		}
		p.Down++
		if matches {
			b.selDown++
		}
		reasons[t.Reason]++
		if firstDown.IsZero() || t.Since.Before(firstDown) {
			firstDown = t.Since
		}
	}
	if f.State == "up" {
		b.selDown = 0
	}
	if f.State == "down" {
		b.selUp = 0
	}
	p.Selected = b.selDown + b.selUp
	// The API's since counts the targets in maintenance among the down ones; the verdict's
	// does not.
	since, verdictSince := lastFlip, lastFlip
	if p.Down > 0 {
		since, verdictSince = firstNotUp, firstDown
		var worst checks.Reason
		worst, p.WorstCount = WorstReason(ps.Type, reasons)
		p.WorstReason = string(worst)
		p.OtherReasons = len(reasons) - 1
	}
	p.VerdictSince = verdictSince
	since, lastChecked = since.UTC(), lastChecked.UTC()
	p.Since, p.LastChecked = &since, &lastChecked
	return b
}

// paginate lays the selected target rows end to end in the page's order (the down targets of
// every provider first, provider by provider, then the ready ones) and fills in those of page
// f.Page: only the rows on the page are built, so a status's memory does not grow with the
// fleet.
func paginate(providers []*builder, f Filter) Page {
	lo := (f.Page - 1) * PageRows
	hi := lo + PageRows
	offset := 0
	for _, up := range []bool{false, true} {
		if up && f.State == "down" || !up && f.State == "up" {
			continue
		}
		for _, b := range providers {
			n := b.selDown
			if up {
				n = b.selUp
			}
			if from, to := max(lo-offset, 0), min(hi-offset, n); from < to {
				b.fill(up, from, to)
			}
			offset += n
		}
	}
	for _, b := range providers {
		b.p.Targets = append(append(b.p.Targets, b.down...), b.up...)
	}
	return Page{Number: f.Page, Pages: max(1, (offset+PageRows-1)/PageRows), Size: PageRows, Total: offset}
}

// fill builds the rows from..to-1 of the provider's down targets (up false) or ready ones (up
// true), in the providers file's order.
func (b *builder) fill(up bool, from, to int) {
	k := 0
	for i := range b.ps.Targets {
		t := &b.ps.Targets[i]
		if t.Up != up || InMaintenance(t) || !b.f.Matches(b.ps, t) {
			continue
		}
		if k >= to {
			return
		}
		if k >= from {
			if up {
				b.up = append(b.up, targetOf(b.ps, t))
			} else {
				b.down = append(b.down, targetOf(b.ps, t))
			}
		}
		k++
	}
}

func targetOf(ps *checks.ProviderState, t *checks.TargetState) Target {
	labels := ps.Labels.Of(t.Target)
	if labels == nil {
		labels = map[string]string{}
	}
	tg := Target{
		Name: t.Target, Up: t.Up, Reason: string(t.Reason), Meaning: checks.Meaning(ps.Type, t.Reason), Message: t.Message,
		Labels: labels,
		Since:  t.Since.UTC(), LastContacted: t.CheckedAt.UTC(), CheckDuration: t.Duration.Seconds(),
		Pending: PendingNote(t), CheckReason: string(t.CheckReason),
		ConsecutiveFailures: t.ConsecutiveFailures, ConsecutiveSuccesses: t.ConsecutiveSuccesses,
		History: []Transition{},
		Recent:  t.Recent,
	}
	h := t.History
	if len(h) == 1 && h[0].First {
		h = nil // unchanged since its first verdict: the target's own fields say all of it
	}
	for _, tr := range h[max(0, len(h)-checks.HistoryLength):] {
		tg.History = append(tg.History, Transition{At: tr.At.UTC(), First: tr.First, FromUp: tr.FromUp, FromReason: string(tr.FromReason),
			Up: tr.Up, Reason: string(tr.Reason), Message: tr.Message})
	}
	return tg
}

func writerOf(r crdwriter.Report) *Writer {
	w := &Writer{Writing: r.Writing, SyncedRound: r.SyncedRound, Problems: []ObjectProblem{}}
	for _, p := range r.Problems {
		op := ObjectProblem{Provider: p.Provider, Problem: p.Problem, Error: p.Err, Since: p.Since.UTC(), Attempts: p.Attempts}
		if !p.RetryAt.IsZero() {
			at := p.RetryAt.UTC()
			op.RetryAt = &at
		}
		w.Problems = append(w.Problems, op)
	}
	return w
}

// PendingNote says that a threshold holds t's verdict, and what the last check said; "" when
// none does.
func PendingNote(t *checks.TargetState) string {
	switch {
	case t.FailuresPending():
		return fmt.Sprintf("failures pending (%d of %d): %s", t.ConsecutiveFailures, t.Thresholds.Failure, t.CheckReason)
	case t.RecoveryPending():
		return fmt.Sprintf("recovery pending (%d of %d): %s", t.ConsecutiveSuccesses, t.Thresholds.Success, t.CheckReason)
	}
	return ""
}

// InMaintenance reports a target deliberately out of service: a status lists it apart.
func InMaintenance(t *checks.TargetState) bool {
	return !t.Up && t.Reason == checks.ReasonMaintenance
}

// recentCounts counts a provider's recent checks that contacted a target outside maintenance,
// and those of them that read Ready.
func recentCounts(ps *checks.ProviderState) (ready, all int) {
	for i := range ps.Targets {
		for _, c := range ps.Targets[i].Recent {
			if c.NotContacted || c.Reason == checks.ReasonMaintenance {
				continue
			}
			all++
			if c.Up {
				ready++
			}
		}
	}
	return ready, all
}

// WorstReason returns the reason most down targets share; a tie goes to the reason listed first
// in the provider type's catalogue (for KVM: the earliest dial stage), then by name.
func WorstReason(typ checks.ProviderType, counts map[checks.Reason]int) (checks.Reason, int) {
	catalogue := checks.Reasons(typ)
	rank := func(r checks.Reason) int {
		if i := slices.Index(catalogue, r); i >= 0 {
			return i
		}
		return len(catalogue)
	}
	var worst checks.Reason
	n := 0
	for r, c := range counts {
		if c > n || c == n && (rank(r) < rank(worst) || rank(r) == rank(worst) && r < worst) {
			worst, n = r, c
		}
	}
	return worst, n
}
