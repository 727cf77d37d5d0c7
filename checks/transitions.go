package checks

import (
	"log/slog"
	"time"
)

// apply records one round's verdicts for a provider and logs the transitions they make. Only
// changes are logged, so that an on-call reading the log sees when and why a target went down
// and when it came back, and steady state stays silent:
//   - a target's first verdict (the first round, or a target new after a reload): its initial
//     state, at info when up and at warn when down;
//   - going down, and changing reason while down: warn, with the reason and the message;
//   - coming back up: info, with how long it was down (since it went down, whatever reasons
//     it had meanwhile).
//
// A message that changes while the reason stays the same is not a transition. Since moves only
// when Up flips.
func (pm *providerMemory) apply(logger *slog.Logger, provider string, verdicts []TargetResult) {
	for _, v := range verdicts {
		prev := pm.targets[v.Target]
		// A flip is dated by the check that observed it; a verdict that contacted nothing
		// (CheckedAt is the last contact's) by now, when it is recorded.
		observed := v.CheckedAt
		if v.NotContacted {
			observed = time.Now()
		}
		st := &TargetState{TargetResult: v, Since: observed}
		switch {
		case prev == nil:
			if v.Up {
				logger.Info("target is up", "provider", provider, "target", v.Target)
			} else {
				logger.Warn("target is down", "provider", provider, "target", v.Target,
					"reason", string(v.Reason), "message", v.Message)
			}
		case prev.Up && !v.Up:
			logger.Warn("target went down", "provider", provider, "target", v.Target,
				"reason", string(v.Reason), "message", v.Message)
		case !prev.Up && v.Up:
			logger.Info("target is back up", "provider", provider, "target", v.Target,
				"down_for", observed.Sub(prev.Since).Round(time.Millisecond),
				"previous_reason", string(prev.Reason))
		case !prev.Up && prev.Reason != v.Reason:
			logger.Warn("target is still down with another reason", "provider", provider, "target", v.Target,
				"reason", string(v.Reason), "previous_reason", string(prev.Reason), "message", v.Message,
				"down_for", observed.Sub(prev.Since).Round(time.Millisecond))
			st.Since = prev.Since
		default:
			st.Since = prev.Since
		}
		pm.targets[v.Target] = st
	}
}
