package checks

import "fmt"

// Thresholds are a provider's failureThreshold and successThreshold, with the meaning Kubernetes
// gives them in a probe: a target that reads up turns down after Failure consecutive failed
// checks, and a target that reads down turns up after Success consecutive successful ones.
// Between them the published verdict holds.
//
// A target's first checks follow the kubelet prober's rule for a probe's initial state: the run
// of equal results is counted from the first result, the thresholds apply from there, and until
// one is met the target keeps its initial value, which here is "no verdict" (the kubelet's
// Unknown, a startup probe's initial value): the target is listed in ProviderState.Unchecked,
// neither up nor down. Its first verdict is up after Success consecutive successful checks, or
// down after Failure consecutive failed ones. docs/configuration.md says why neither of the
// other initial values (a readiness probe's Failure, a liveness probe's Success) was chosen.
// Rounds that did not start a target's check (TargetResult.NotStarted) are not results: they
// neither count nor break a run.
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
	// Labels are the provider's labels and its targets' (the providers file's labels maps),
	// exported once per target in target_info. Labels change no checker (a reload that
	// changes only labels keeps it) and no verdict, but for the maintenance label
	// (config.MaintenanceLabel), which puts a target in Maintenance.
	Labels Labels
}

// Labels are a provider's labels (for every target) and per-target ones, which win.
type Labels struct {
	Provider map[string]string
	Targets  map[string]map[string]string
}

// Of returns target's labels: the provider's, with the target's own over them; nil when it
// has none. The result must not be modified.
func (l Labels) Of(target string) map[string]string {
	own := l.Targets[target]
	switch {
	case len(own) == 0:
		return l.Provider
	case len(l.Provider) == 0:
		return own
	}
	out := make(map[string]string, len(l.Provider)+len(own))
	for k, v := range l.Provider {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// threshold turns the result of the last check (raw) into the verdict to publish, given what
// the runner remembers of the target before it (prev: its published state when it has a
// verdict, else its first checks' counts). It counts consecutive failures and successes and
// returns the new state, without Since, History and the check counters, the message of the
// check the verdict stands on (Message adds the pending note to it), and whether the target has
// a verdict now.
func threshold(prev *targetMemory, raw TargetResult, th Thresholds) (TargetState, string, bool) {
	st := TargetState{TargetResult: raw, CheckReason: raw.Reason, CheckMessage: raw.Message, Thresholds: th}
	if raw.Reason == ReasonMaintenance {
		// Deliberately out of service, not a failure: in force at once whatever the
		// thresholds, and counted toward neither.
		return st, raw.Message, true
	}
	if raw.Up {
		st.ConsecutiveSuccesses = 1 + prev.state.ConsecutiveSuccesses
	} else {
		st.ConsecutiveFailures = 1 + prev.state.ConsecutiveFailures
	}
	if prev.verdict && prev.state.Reason == ReasonMaintenance || prev.maintenanceEnded {
		// Out of maintenance: the check's own verdict at once, its run counted from this check.
		return st, raw.Message, true
	}
	if !prev.verdict {
		// The initial state: no verdict until a threshold is met.
		if raw.Up && st.ConsecutiveSuccesses >= th.Success || !raw.Up && st.ConsecutiveFailures >= th.Failure {
			return st, raw.Message, true
		}
		if raw.Up {
			st.Message = fmt.Sprintf("no verdict yet: answering Ready, %d of %d consecutive successful checks (successThreshold) give the first verdict; the last check: %s",
				st.ConsecutiveSuccesses, th.Success, describeCheck(raw))
		} else {
			st.Message = fmt.Sprintf("no verdict yet: %d of %d consecutive failed checks (failureThreshold) give the first verdict; the last check: %s",
				st.ConsecutiveFailures, th.Failure, describeCheck(raw))
		}
		return st, raw.Message, false
	}
	switch {
	case prev.state.Up && !raw.Up && st.ConsecutiveFailures < th.Failure:
		// Failures pending: still up.
		st.Up, st.Reason = true, ReasonReady
		st.Message = fmt.Sprintf("failures pending: %d of %d consecutive failed checks (failureThreshold) turn the target down; the last check: %s",
			st.ConsecutiveFailures, th.Failure, describeCheck(raw))
		return st, prev.verdictMessage, true
	case !prev.state.Up && raw.Up && st.ConsecutiveSuccesses < th.Success:
		// Recovery pending: still down, for the reason it went down with.
		st.Up, st.Reason = false, prev.state.Reason
		st.Message = fmt.Sprintf("recovery pending: answering Ready, %d of %d consecutive successful checks (successThreshold) turn the target up; the last check: %s; down: %s",
			st.ConsecutiveSuccesses, th.Success, describeCheck(raw), prev.verdictMessage)
		return st, prev.verdictMessage, true
	}
	return st, raw.Message, true
}

// describeCheck is a check's reason and message, for a pending verdict's message.
func describeCheck(r TargetResult) string {
	if r.Message == "" {
		return string(r.Reason)
	}
	return string(r.Reason) + ": " + r.Message
}
