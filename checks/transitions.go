package checks

import (
	"log/slog"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/redact"
)

// targetMemory is what the runner remembers of a target between rounds, from the moment it
// lists the target.
type targetMemory struct {
	// verdict is true once the target has a verdict (its checks met a threshold); until then it
	// is published as unchecked and state holds only its first checks' counts and last check.
	verdict bool
	// state is the published state, as the next snapshot shows it (once verdict is true).
	state TargetState
	// verdictMessage is the message of the check the published verdict stands on: the same as
	// state.Message unless a change is pending, when state.Message adds the pending note.
	verdictMessage string
	// listed is when the runner first listed the target.
	listed time.Time
	// notStarted is the message of the last round that did not start the target's check, ""
	// when the last round did: what an unchecked target shows.
	notStarted string
	// operatorMaintenance is set while the published Maintenance is the operator's (the
	// maintenance label), not the provider's own.
	operatorMaintenance bool
	// maintenanceEnded is set when the operator's maintenance ended in a round that did not
	// start the target: it has no verdict until its next check, which is published at once,
	// as out of maintenance.
	maintenanceEnded bool
	// carried is set while the verdict and counts are another replica's (Carried): they drive
	// this replica's thresholds from its first check on, but are not published before it.
	carried bool
}

// unchecked is the target as ProviderState.Unchecked lists it; m has no verdict.
func (m *targetMemory) unchecked(target string) UncheckedTarget {
	u := UncheckedTarget{
		Target: target, Listed: m.listed, Message: m.notStarted,
		ConsecutiveFailures: m.state.ConsecutiveFailures, ConsecutiveSuccesses: m.state.ConsecutiveSuccesses,
		Checks: m.state.Checks, FailedChecks: m.state.FailedChecks,
	}
	if m.state.Checks > 0 {
		u.CheckedAt, u.CheckReason = m.state.CheckedAt, m.state.CheckReason
		if u.Message == "" {
			u.Message = m.state.Message
		}
	}
	if u.Message == "" {
		u.Message = "not checked yet: no round has started its check"
	}
	return u
}

// list makes the runner remember the targets it did not list yet, as listed at now. A target
// never checked here takes the state carry gives it (nil: none).
func (pm *providerMemory) list(provider string, targets []string, now time.Time, carry Carrier) {
	for _, t := range targets {
		m := pm.targets[t]
		if m == nil {
			m = &targetMemory{listed: now}
			pm.targets[t] = m
		}
		if carry == nil || m.verdict || m.maintenanceEnded || m.state.Checks > 0 {
			continue
		}
		if c, ok := carry(provider, t); ok {
			m.carry(t, c)
		}
	}
}

// carry gives m, just listed, the verdict and counts c another replica published.
func (m *targetMemory) carry(target string, c Carried) {
	m.verdict, m.carried = true, true
	m.verdictMessage = c.Message
	m.state = TargetState{
		TargetResult:         TargetResult{Target: target, Up: c.Up, Reason: c.Reason, Message: c.Message, CheckedAt: c.CheckedAt},
		Since:                c.Since,
		CheckReason:          c.Reason,
		CheckMessage:         c.Message,
		ConsecutiveFailures:  c.ConsecutiveFailures,
		ConsecutiveSuccesses: c.ConsecutiveSuccesses,
	}
	m.notStarted = "taken over from another replica, not checked here yet"
}

// apply records one round's check results for a provider, turns them into the verdicts to
// publish through the provider's thresholds (the one place they apply, so the snapshot, the
// metrics, the status page, the logs and the ProviderHealth objects all see the same verdict),
// and logs the transitions of those verdicts. Only changes are logged, so that an on-call reading
// the log sees when and why a target went down and when it came back, and steady state stays
// silent:
//   - a target's first verdict (once its first checks meet a threshold, after the start or
//     after a reload that added it): its initial state, at info when up and at warn when down;
//   - going down, and changing reason while down: warn, with the reason and the message;
//   - coming back up: info, with how long it was down (since it went down, whatever reasons
//     it had meanwhile).
//
// A check whose result a threshold holds back is logged at debug only. A message that changes
// while the reason stays the same is not a transition. Since moves only when Up flips. Every
// transition is also kept in the target's History. A result that did not start the check
// (NotStarted) changes nothing but the note an unchecked target shows, except after the
// operator's maintenance (operator lists the targets it holds this round): a target whose
// maintenance ended in a round that did not start it is not in maintenance any more, and no
// check has said what it is: it has no verdict (unchecked) until its next check.
func (pm *providerMemory) apply(logger *slog.Logger, provider string, th Thresholds, results []TargetResult, operator map[string]bool) {
	th = th.normalized()
	for _, raw := range results {
		prev := pm.targets[raw.Target]
		if prev == nil {
			// The runner lists every target before applying its results (list).
			prev = &targetMemory{listed: time.Now()}
		}
		if raw.NotStarted {
			next := *prev
			next.notStarted = raw.Message
			next.state.Recent = appendRecent(prev.state.Recent, RecentCheck{At: time.Now(), Reason: raw.Reason, NotContacted: true})
			if prev.verdict && prev.operatorMaintenance {
				logger.Info("target is out of maintenance, not checked since", "provider", provider, "target", raw.Target)
				next.verdict, next.operatorMaintenance, next.maintenanceEnded = false, false, true
				next.notStarted = "out of maintenance, not checked since: " + raw.Message
				next.state.ConsecutiveFailures, next.state.ConsecutiveSuccesses = 0, 0
			}
			pm.targets[raw.Target] = &next
			continue
		}
		// A flip is dated by the check that observed it; a verdict that contacted nothing
		// (CheckedAt is the last contact's) by now, when it is recorded.
		observed := raw.CheckedAt
		if raw.NotContacted {
			observed = time.Now()
		}
		st, verdictMessage, verdict := threshold(prev, raw, th)
		st.Checks, st.FailedChecks = prev.state.Checks+1, prev.state.FailedChecks
		if !raw.Up && raw.Reason != ReasonMaintenance {
			st.FailedChecks++
		}
		next := &targetMemory{verdict: verdict, state: st, verdictMessage: verdictMessage, listed: prev.listed, operatorMaintenance: operator[raw.Target]}
		next.state.Recent = appendRecent(prev.state.Recent, RecentCheck{At: observed, Up: raw.Up, Reason: raw.Reason, NotContacted: raw.NotContacted})
		pm.targets[raw.Target] = next
		v := &next.state.TargetResult
		next.state.Since = observed
		tr := Transition{At: observed, Up: v.Up, Reason: v.Reason, Message: Clip(verdictMessage, maxHistoryMessage)}
		switch {
		case !verdict:
			logger.Debug("no verdict yet: the first checks have not met a threshold", "provider", provider, "target", v.Target,
				"check_reason", string(st.CheckReason), "consecutive_failures", st.ConsecutiveFailures,
				"consecutive_successes", st.ConsecutiveSuccesses, "failure_threshold", th.Failure,
				"success_threshold", th.Success)
			continue
		case !prev.verdict && !prev.maintenanceEnded:
			tr.First = true
			if v.Up {
				logger.Info("target is up", "provider", provider, "target", v.Target)
			} else {
				logger.Warn("target is down", "provider", provider, "target", v.Target,
					"reason", string(v.Reason), "message", v.Message)
			}
			next.state.History = appendHistory(nil, tr)
			continue
		case v.Reason == ReasonMaintenance && prev.state.Reason != ReasonMaintenance:
			logger.Info("target is in maintenance", "provider", provider, "target", v.Target, "message", v.Message)
		case prev.state.Up && !v.Up:
			logger.Warn("target went down", "provider", provider, "target", v.Target,
				"reason", string(v.Reason), "message", v.Message,
				"consecutive_failures", st.ConsecutiveFailures)
		case !prev.state.Up && v.Up:
			logger.Info("target is back up", "provider", provider, "target", v.Target,
				"down_for", observed.Sub(prev.state.Since).Round(time.Millisecond),
				"previous_reason", string(prev.state.Reason),
				"consecutive_successes", st.ConsecutiveSuccesses)
		case !prev.state.Up && prev.state.Reason != v.Reason:
			logger.Warn("target is still down with another reason", "provider", provider, "target", v.Target,
				"reason", string(v.Reason), "previous_reason", string(prev.state.Reason), "message", v.Message,
				"down_for", observed.Sub(prev.state.Since).Round(time.Millisecond))
			next.state.Since = prev.state.Since
		default:
			next.state.Since = prev.state.Since
			next.state.History = prev.state.History
			if next.state.FailuresPending() || next.state.RecoveryPending() {
				logger.Debug("check result held back by a threshold", "provider", provider, "target", v.Target,
					"check_reason", string(st.CheckReason), "consecutive_failures", st.ConsecutiveFailures,
					"consecutive_successes", st.ConsecutiveSuccesses, "failure_threshold", th.Failure,
					"success_threshold", th.Success)
			}
			continue
		}
		tr.FromUp, tr.FromReason = prev.state.Up, prev.state.Reason
		next.state.History = appendHistory(prev.state.History, tr)
	}
}

// appendHistory returns h with t appended, keeping the last HistoryLength transitions, and
// always the last one that turned the target down (or its first verdict when that was down), so
// that changes of reason while down never push out when it went down. h is shared with
// published snapshots, so a new slice is built (transitions are rare; a round without any
// copies nothing).
func appendHistory(h []Transition, t Transition) []Transition {
	all := append(append(make([]Transition, 0, len(h)+1), h...), t)
	drop := len(all) - HistoryLength
	if drop <= 0 {
		return all
	}
	pin := -1
	for i := len(all) - 1; i >= 0; i-- {
		if !all[i].Up && (all[i].First || all[i].FromUp) {
			pin = i
			break
		}
	}
	out := make([]Transition, 0, HistoryLength)
	for i, tr := range all {
		if drop > 0 && i != pin {
			drop--
			continue
		}
		out = append(out, tr)
	}
	return out
}

// Clip cuts a message to at most n bytes at a UTF-8 boundary, marking the cut with "...": for
// the transition history here, and the ProviderHealth object's messages and Events.
func Clip(s string, n int) string { return redact.Clip(s, n) }
