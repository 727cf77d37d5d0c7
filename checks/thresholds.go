package checks

import "fmt"

// Thresholds are a provider's failureThreshold and successThreshold, with the meaning Kubernetes
// gives them in a probe: a target that reads up turns down after Failure consecutive failed
// checks, and a target that reads down turns up after Success consecutive successful ones.
// Between them the published verdict holds. A target's first check is published as it is: there
// is no verdict to hold yet.
type Thresholds struct {
	Failure int
	Success int
}

// DefaultThresholds publish every check's verdict at once.
var DefaultThresholds = Thresholds{Failure: 1, Success: 1}

// normalized replaces a threshold below 1 by 1.
func (th Thresholds) normalized() Thresholds {
	return Thresholds{Failure: max(th.Failure, 1), Success: max(th.Success, 1)}
}

// Provider is a configured checker and the thresholds the runner applies to its verdicts.
type Provider struct {
	Checker    Checker
	Thresholds Thresholds
}

// threshold turns the result of the last check (raw) into the verdict to publish, given the
// published state before it (prev, nil for a target's first check). It counts consecutive
// failures and successes and returns the new state, without Since and History, and the message
// of the check the verdict stands on (Message adds the pending note to it).
func threshold(prev *targetMemory, raw TargetResult, th Thresholds) (TargetState, string) {
	st := TargetState{TargetResult: raw, CheckReason: raw.Reason, CheckMessage: raw.Message, Thresholds: th}
	if raw.Up {
		st.ConsecutiveSuccesses = 1
	} else {
		st.ConsecutiveFailures = 1
	}
	if prev == nil {
		return st, raw.Message
	}
	if raw.Up {
		st.ConsecutiveSuccesses += prev.state.ConsecutiveSuccesses
	} else {
		st.ConsecutiveFailures += prev.state.ConsecutiveFailures
	}
	switch {
	case prev.state.Up && !raw.Up && st.ConsecutiveFailures < th.Failure:
		// Failures pending: still up.
		st.Up, st.Reason = true, ReasonReady
		st.Message = fmt.Sprintf("failures pending: %d of %d consecutive failed checks (failureThreshold) turn the target down; the last check: %s",
			st.ConsecutiveFailures, th.Failure, describeCheck(raw))
		return st, prev.verdictMessage
	case !prev.state.Up && raw.Up && st.ConsecutiveSuccesses < th.Success:
		// Recovery pending: still down, for the reason it went down with.
		st.Up, st.Reason = false, prev.state.Reason
		st.Message = fmt.Sprintf("recovery pending: %d of %d consecutive successful checks (successThreshold) turn the target up; the last check: %s; down: %s",
			st.ConsecutiveSuccesses, th.Success, describeCheck(raw), prev.verdictMessage)
		return st, prev.verdictMessage
	}
	return st, raw.Message
}

// describeCheck is a check's reason and message, for a pending verdict's message.
func describeCheck(r TargetResult) string {
	if r.Message == "" {
		return string(r.Reason)
	}
	return string(r.Reason) + ": " + r.Message
}
