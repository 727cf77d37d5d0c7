package checks

import (
	"log/slog"
	"time"
	"unicode/utf8"
)

// targetMemory is what the runner remembers of a target between rounds.
type targetMemory struct {
	// state is the published state, as the next snapshot shows it.
	state TargetState
	// verdictMessage is the message of the check the published verdict stands on: the same as
	// state.Message unless a change is pending, when state.Message adds the pending note.
	verdictMessage string
}

// apply records one round's check results for a provider, turns them into the verdicts to
// publish through the provider's thresholds (the one place they apply, so the snapshot, the
// metrics, the status page, the logs and the ProviderHealth objects all see the same verdict),
// and logs the transitions of those verdicts. Only changes are logged, so that an on-call reading
// the log sees when and why a target went down and when it came back, and steady state stays
// silent:
//   - a target's first verdict (the first round, or a target new after a reload): its initial
//     state, at info when up and at warn when down;
//   - going down, and changing reason while down: warn, with the reason and the message;
//   - coming back up: info, with how long it was down (since it went down, whatever reasons
//     it had meanwhile).
//
// A check whose result a threshold holds back is logged at debug only. A message that changes
// while the reason stays the same is not a transition. Since moves only when Up flips. Every
// transition is also kept in the target's History.
func (pm *providerMemory) apply(logger *slog.Logger, provider string, th Thresholds, results []TargetResult) {
	th = th.normalized()
	for _, raw := range results {
		prev := pm.targets[raw.Target]
		// A flip is dated by the check that observed it; a verdict that contacted nothing
		// (CheckedAt is the last contact's) by now, when it is recorded.
		observed := raw.CheckedAt
		if raw.NotContacted {
			observed = time.Now()
		}
		st, verdictMessage := threshold(prev, raw, th)
		v := &st.TargetResult
		st.Since = observed
		tr := Transition{At: observed, Up: v.Up, Reason: v.Reason, Message: Clip(verdictMessage, maxHistoryMessage)}
		switch {
		case prev == nil:
			tr.First = true
			if v.Up {
				logger.Info("target is up", "provider", provider, "target", v.Target)
			} else {
				logger.Warn("target is down", "provider", provider, "target", v.Target,
					"reason", string(v.Reason), "message", v.Message)
			}
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
			st.Since = prev.state.Since
		default:
			st.Since = prev.state.Since
			st.History = prev.state.History
			if st.FailuresPending() || st.RecoveryPending() {
				logger.Debug("check result held back by a threshold", "provider", provider, "target", v.Target,
					"check_reason", string(st.CheckReason), "consecutive_failures", st.ConsecutiveFailures,
					"consecutive_successes", st.ConsecutiveSuccesses, "failure_threshold", th.Failure,
					"success_threshold", th.Success)
			}
			pm.targets[raw.Target] = &targetMemory{state: st, verdictMessage: verdictMessage}
			continue
		}
		if prev != nil {
			tr.FromUp, tr.FromReason = prev.state.Up, prev.state.Reason
			st.History = appendHistory(prev.state.History, tr)
		} else {
			st.History = appendHistory(nil, tr)
		}
		pm.targets[raw.Target] = &targetMemory{state: st, verdictMessage: verdictMessage}
	}
}

// appendHistory returns h with t appended, keeping the last HistoryLength transitions. h is
// shared with published snapshots, so a new slice is built (transitions are rare; a round
// without any copies nothing).
func appendHistory(h []Transition, t Transition) []Transition {
	keep := h[max(0, len(h)-(HistoryLength-1)):]
	out := make([]Transition, 0, len(keep)+1)
	return append(append(out, keep...), t)
}

// Clip cuts a message to at most n bytes at a UTF-8 boundary, marking the cut with "...": for
// the transition history here, and the ProviderHealth object's messages and Events.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
