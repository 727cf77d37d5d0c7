package crdwriter

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// Bounds of the texts the writer composes. The API server would accept more, but a kubectl
// column or an Event is read at a glance.
const (
	// maxListedDown is how many down targets the Ready condition's message names.
	maxListedDown = 10
	// maxInlineMessage bounds a target's message quoted in the condition's message.
	maxInlineMessage = 256
	// maxEventMessage bounds an Event's message.
	maxEventMessage = 1024
)

// targetMem is what the writer remembers of one target.
type targetMem struct {
	up      bool
	reason  string
	message string
	// since moves only when up flips: the target's lastTransitionTime.
	since time.Time
}

// providerMem is what the writer remembers of one provider: the desired status in a form that
// keeps every target (the status itself is bounded) and the transition times, which survive
// rounds, reloads and (read back from the live object) restarts.
type providerMem struct {
	typ     string
	order   []string // the targets, in the checker's order
	targets map[string]*targetMem
	cond    *metav1.Condition
	// lastChecked is the newest CheckedAt among the provider's targets: zero until checked.
	lastChecked time.Time
	// seed is what the live object said when memory was read back from it (a restart, a new
	// leader), until the first snapshot that lists the provider's targets: nil otherwise.
	seed *seedCounts
	// noTargets says the last snapshot listed no target of the provider at all, with a
	// verdict or without (a kvm provider whose host files list no host).
	noTargets bool
}

// seedCounts are the counts of a live object memory was read back from. Its targets list holds
// at most v1alpha1.MaxTargets entries, so memory knows the other targets only by these counts.
type seedCounts struct {
	ready, total, omitted int32
	// unlistedDown is how many down targets the object did not list: when more targets were
	// down than its list holds, memory cannot tell which of the unlisted ones were down.
	unlistedDown int32
}

// targetEvent is one target transition to report as a Kubernetes Event.
type targetEvent struct {
	seq       uint64 // the order in which the writer saw it (set when queued)
	target    string // the target it is about: its Event budget (events.go)
	eventType string // corev1.EventTypeNormal or corev1.EventTypeWarning
	reason    string
	message   string
}

// memFromStatus seeds a provider's memory from the status of its live object, so transition
// times survive a restart of the exporter or a change of leader.
func memFromStatus(st *v1alpha1.ProviderHealthStatus) *providerMem {
	m := &providerMem{typ: st.Type, targets: make(map[string]*targetMem, len(st.Targets))}
	for _, t := range st.Targets {
		if _, dup := m.targets[t.Name]; dup {
			continue
		}
		m.order = append(m.order, t.Name)
		m.targets[t.Name] = &targetMem{up: t.Up, reason: t.Reason, message: t.Message, since: t.LastTransitionTime.Time}
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1alpha1.ConditionReady {
			c := st.Conditions[i]
			m.cond = &c
		}
	}
	listedDown := int32(0)
	for _, t := range m.targets {
		if !t.up {
			listedDown++
		}
	}
	m.seed = &seedCounts{ready: st.ReadyTargets, total: st.TotalTargets, omitted: st.OmittedTargets,
		unlistedDown: max(0, st.TotalTargets-st.ReadyTargets-listedDown)}
	return m
}

// adopt takes the transition times of an object this writer had not read before (an object
// adopted after a name clash, or found when creating it) where it agrees with memory: a target
// that has the same up there keeps the object's older lastTransitionTime, and so does the Ready
// condition when it has the same status. It returns the targets whose verdict the object
// already showed, whose pending Events were recorded by the object's earlier writer.
func (m *providerMem) adopt(st *v1alpha1.ProviderHealthStatus) map[string]bool {
	if st.Type != m.typ {
		return nil
	}
	shown := map[string]bool{}
	for _, t := range st.Targets {
		mt := m.targets[t.Name]
		if mt == nil || mt.up != t.Up {
			continue
		}
		if at := t.LastTransitionTime.Time; !at.IsZero() && at.Before(mt.since) {
			mt.since = at
		}
		if mt.reason == t.Reason {
			shown[t.Name] = true
		}
	}
	for _, c := range st.Conditions {
		if c.Type == v1alpha1.ConditionReady && m.cond != nil && c.Status == m.cond.Status &&
			!c.LastTransitionTime.IsZero() && c.LastTransitionTime.Before(&m.cond.LastTransitionTime) {
			m.cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	return shown
}

// observe folds a provider's state from the snapshot of round into its memory and returns the
// target transitions to report. A provider not checked yet (no targets) leaves known targets
// alone, so that a restart does not wipe the verdicts and transition times read back from the
// live object; but a provider this writer has seen checked that then lists no target at all
// (with a verdict or without: a kvm provider whose host files list no host any more) has none,
// and the object says so.
func (m *providerMem) observe(ps *checks.ProviderState, round uint64, now time.Time, staleAfter time.Duration) []targetEvent {
	if m.targets == nil {
		m.targets = make(map[string]*targetMem)
	}
	if typ := string(ps.Type); typ != m.typ {
		if m.typ != "" {
			// The provider kept its name but changed type (a reload): the runner dropped its
			// targets, and the old verdicts and times say nothing about the new checker's.
			// Start afresh rather than write the new type beside the old targets.
			m.targets = make(map[string]*targetMem)
			m.order, m.cond, m.lastChecked, m.seed = nil, nil, time.Time{}, nil
		}
		m.typ = typ
	}
	var events []targetEvent
	if len(ps.Targets) > 0 {
		// After a restart, a target the live object did not list was up unless the object had
		// more down targets than its list holds: then whether it was down (its Event already
		// recorded) cannot be told, and no Event is recorded for it being down.
		unsure := m.seed != nil && m.seed.unlistedDown > 0
		m.seed = nil
		order := make([]string, 0, len(ps.Targets))
		seen := make(map[string]bool, len(ps.Targets))
		m.lastChecked = time.Time{}
		for i := range ps.Targets {
			ts := &ps.Targets[i]
			if seen[ts.Target] {
				continue
			}
			seen[ts.Target] = true
			order = append(order, ts.Target)
			if ts.CheckedAt.After(m.lastChecked) {
				m.lastChecked = ts.CheckedAt
			}
			reason := string(ts.Reason)
			if reason == "" {
				reason = string(checks.ReasonTimeout)
				if ts.Up {
					reason = string(checks.ReasonReady)
				}
			}
			flipAt := ts.Since
			if flipAt.IsZero() {
				flipAt = ts.CheckedAt
			}
			if flipAt.IsZero() || flipAt.After(now) {
				flipAt = now
			}
			flipAt = flipAt.Truncate(time.Second)
			prev := m.targets[ts.Target]
			switch {
			case prev == nil:
				m.targets[ts.Target] = &targetMem{up: ts.Up, reason: reason, message: ts.Message, since: flipAt}
				if !ts.Up && !unsure {
					events = append(events, downEvent(ts.Target, reason, ts.Message))
				}
				continue
			case prev.up != ts.Up:
				if ts.Up {
					events = append(events, upEvent(ts.Target, prev.reason, flipAt.Sub(prev.since)))
				} else {
					events = append(events, downEvent(ts.Target, reason, ts.Message))
				}
				if flipAt.Before(prev.since) {
					flipAt = prev.since
				}
				prev.since = flipAt
			case !ts.Up && prev.reason != reason && (reason == string(checks.ReasonMaintenance) || prev.reason == string(checks.ReasonMaintenance)):
				// Into or out of maintenance while not up: a change of kind, not "still down".
				events = append(events, downEvent(ts.Target, reason, ts.Message))
			case !ts.Up && prev.reason != reason:
				events = append(events, targetEvent{target: ts.Target, eventType: "Warning", reason: reason,
					message: checks.Clip(fmt.Sprintf("target %s is still down, now %s (was %s): %s", ts.Target, reason, prev.reason, ts.Message), maxEventMessage)})
			}
			prev.up, prev.reason, prev.message = ts.Up, reason, ts.Message
		}
		keep := notYetListed(ps)
		for _, name := range m.order {
			if !seen[name] && keep[name] && m.targets[name] != nil {
				order = append(order, name)
				seen[name] = true
			}
		}
		for name := range m.targets {
			if !seen[name] {
				delete(m.targets, name)
			}
		}
		m.order = order
	}
	// Only for a provider this writer has seen checked: a restarted writer keeps what the live
	// object says until the provider's first verdicts.
	m.noTargets = round > 0 && len(ps.Targets) == 0 && len(ps.Unchecked) == 0 &&
		(m.noTargets || m.seed == nil && !m.lastChecked.IsZero())
	if m.noTargets {
		m.targets, m.order, m.seed, m.lastChecked = make(map[string]*targetMem), nil, nil, time.Time{}
	}
	m.setCondition(m.readyCondition(now, staleAfter), now)
	return events
}

// notYetListed returns the targets of the provider the snapshot does not list yet because
// they have no verdict since the exporter started (or since they were added: ProviderState's
// Unchecked): their verdicts read back from the live object stay until their first verdict.
func notYetListed(ps *checks.ProviderState) map[string]bool {
	if len(ps.Unchecked) == 0 {
		return nil
	}
	keep := make(map[string]bool, len(ps.Unchecked))
	for _, u := range ps.Unchecked {
		keep[u.Target] = true
	}
	return keep
}

func downEvent(target, reason, message string) targetEvent {
	if reason == string(checks.ReasonMaintenance) {
		msg := fmt.Sprintf("target %s is in maintenance", target)
		if message != "" {
			msg += ": " + message
		}
		return targetEvent{target: target, eventType: "Normal", reason: reason, message: checks.Clip(msg, maxEventMessage)}
	}
	msg := fmt.Sprintf("target %s is down (%s)", target, reason)
	if message != "" {
		msg += ": " + message
	}
	return targetEvent{target: target, eventType: "Warning", reason: reason, message: checks.Clip(msg, maxEventMessage)}
}

func upEvent(target, prevReason string, downFor time.Duration) targetEvent {
	msg := fmt.Sprintf("target %s is ready again (was %s)", target, prevReason)
	if downFor > 0 {
		how := "down"
		if prevReason == string(checks.ReasonMaintenance) {
			how = "in maintenance"
		}
		msg = fmt.Sprintf("target %s is ready again after %s %s (was %s)", target, downFor.Round(time.Second), how, prevReason)
	}
	return targetEvent{target: target, eventType: "Normal", reason: string(checks.ReasonReady), message: msg}
}

// readyCondition computes the Ready condition from the remembered targets, without its
// transition time.
func (m *providerMem) readyCondition(now time.Time, staleAfter time.Duration) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady}
	if m.noTargets {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, v1alpha1.ReasonAwaitingFirstCheck, "the provider has no targets to check (a kvm provider whose host files list no host)"
		return c
	}
	if len(m.order) == 0 || m.lastChecked.IsZero() && m.cond == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, v1alpha1.ReasonAwaitingFirstCheck, "the provider has not been checked yet"
		return c
	}
	if m.lastChecked.IsZero() {
		// Seeded from the live object and not checked since this writer started: keep what the
		// object says until the first check.
		c.Status, c.Reason, c.Message = m.cond.Status, m.cond.Reason, m.cond.Message
		return c
	}
	if staleAfter > 0 && now.Sub(m.lastChecked) > staleAfter {
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.ReasonChecksStale
		c.Message = fmt.Sprintf("no check has completed since %s (stale after %s); the targets show their last verdicts",
			m.lastChecked.UTC().Format(time.RFC3339), staleAfter)
		return c
	}
	// A target in maintenance is deliberately out of service: not ready, not down.
	var down, maintenance []string
	reasons := map[string]bool{}
	for _, name := range m.order {
		switch t := m.targets[name]; {
		case t.up:
		case t.reason == string(checks.ReasonMaintenance):
			maintenance = append(maintenance, name)
		default:
			down = append(down, name)
			reasons[t.reason] = true
		}
	}
	total := len(m.order)
	if len(down) == 0 {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAllTargetsReady
		c.Message = fmt.Sprintf("all %d targets ready", total)
		switch {
		case len(maintenance) > 0:
			c.Message = fmt.Sprintf("%d of %d targets ready, none down", total-len(maintenance), total)
		case total == 1:
			c.Message = "the target is ready"
		}
	} else {
		c.Status = metav1.ConditionFalse
		first := m.targets[down[0]]
		if len(reasons) == 1 {
			c.Reason = first.reason
		} else {
			c.Reason = v1alpha1.ReasonMultipleReasons
		}
		switch {
		case len(down) == 1:
			c.Message = fmt.Sprintf("1 of %d targets down: %s (%s)", total, down[0], first.reason)
			if first.message != "" {
				c.Message += ": " + checks.Clip(first.message, maxInlineMessage)
			}
		case len(reasons) == 1:
			c.Message = fmt.Sprintf("%d of %d targets down (%s): %s", len(down), total, first.reason, listNames(down, nil))
		default:
			c.Message = fmt.Sprintf("%d of %d targets down: %s", len(down), total, listNames(down, m.targets))
		}
	}
	if len(maintenance) > 0 {
		c.Message += fmt.Sprintf("; %d in maintenance: %s", len(maintenance), listNames(maintenance, nil))
	}
	if total > v1alpha1.MaxTargets {
		c.Message += fmt.Sprintf(" (%d targets not listed in status.targets, which holds at most %d)", total-v1alpha1.MaxTargets, v1alpha1.MaxTargets)
	}
	return c
}

// listNames lists at most maxListedDown names, each with its reason when targets is given.
func listNames(names []string, targets map[string]*targetMem) string {
	var b strings.Builder
	for i, n := range names {
		if i == maxListedDown {
			fmt.Fprintf(&b, " and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n)
		if targets != nil {
			fmt.Fprintf(&b, " (%s)", targets[n].reason)
		}
	}
	return b.String()
}

// setCondition stores c as the Ready condition with meta.SetStatusCondition, so that its
// transition time moves only when its status changes: then to the time the first target went
// down (True to False), the time the last target came back (False to True), or now (to or from
// Unknown), never backwards.
func (m *providerMem) setCondition(c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(m.flipTime(c.Status, now.Truncate(time.Second)))
	var conds []metav1.Condition
	if m.cond != nil {
		conds = []metav1.Condition{*m.cond}
	}
	meta.SetStatusCondition(&conds, c)
	m.cond = &conds[0]
}

// flipTime is when the Ready condition took status, were it to change to it now.
func (m *providerMem) flipTime(status metav1.ConditionStatus, now time.Time) time.Time {
	if m.cond == nil {
		return now
	}
	var t time.Time
	switch {
	case m.cond.Status == metav1.ConditionTrue && status == metav1.ConditionFalse:
		for _, name := range m.order {
			if tm := m.targets[name]; !tm.up && (t.IsZero() || tm.since.Before(t)) {
				t = tm.since
			}
		}
	case m.cond.Status == metav1.ConditionFalse && status == metav1.ConditionTrue:
		for _, name := range m.order {
			if tm := m.targets[name]; tm.since.After(t) {
				t = tm.since
			}
		}
	}
	at := now
	if !t.IsZero() && t.Before(now) {
		at = t
	}
	if prev := m.cond.LastTransitionTime.Time; at.Before(prev) {
		at = prev
	}
	return at
}

// render returns the status the provider's object should have (without a heartbeat).
func (m *providerMem) render() v1alpha1.ProviderHealthStatus {
	st := v1alpha1.ProviderHealthStatus{Type: m.typ}
	ready := 0
	for _, name := range m.order {
		if m.targets[name].up {
			ready++
		}
	}
	total := len(m.order)
	st.ReadyTargets, st.TotalTargets = int32(ready), int32(total)
	if m.seed != nil {
		// Read back from the live object and not checked since: its counts cover the targets
		// its list left out, which memory does not know one by one.
		st.ReadyTargets, st.TotalTargets, st.OmittedTargets = m.seed.ready, m.seed.total, m.seed.omitted
	}
	st.TargetsReady = fmt.Sprintf("%d/%d", st.ReadyTargets, st.TotalTargets)
	include := func(string) bool { return true }
	if total > v1alpha1.MaxTargets {
		// Down targets first, so that what is broken stays visible; then up ones in order.
		keep := make(map[string]bool, v1alpha1.MaxTargets)
		for _, pass := range []bool{false, true} {
			for _, name := range m.order {
				if len(keep) < v1alpha1.MaxTargets && m.targets[name].up == pass {
					keep[name] = true
				}
			}
		}
		include = func(n string) bool { return keep[n] }
		st.OmittedTargets = int32(total - len(keep))
	}
	for _, name := range m.order {
		if !include(name) {
			continue
		}
		t := m.targets[name]
		st.Targets = append(st.Targets, v1alpha1.TargetStatus{
			Name: name, Up: t.up, Reason: t.reason,
			Message:            checks.Clip(t.message, v1alpha1.MaxTargetMessageLength),
			LastTransitionTime: metav1.NewTime(t.since),
		})
	}
	if m.cond != nil {
		st.Conditions = []metav1.Condition{*m.cond}
	}
	return st
}
