package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// TargetKey names one target of one provider.
type TargetKey struct {
	Provider, Target string
}

func (k TargetKey) String() string { return k.Provider + "/" + k.Target }

// truth is what one target must read from a point in time on: the reasons a correct checker may
// give (usually one) and the fault that causes them ("" when the target is healthy).
type truth struct {
	// Fault names the fault kind that holds on the target, "" when none does.
	Fault string
	// After names the last fault that held on a healthy target ("" if none has yet), so that a
	// recovered target that keeps its fault's reason is reported as such.
	After   string
	Reasons []checks.Reason
}

func (t truth) kind() string {
	switch {
	case t.Fault != "":
		return t.Fault
	case t.After != "":
		return "after " + t.After
	}
	return "healthy"
}

func (t truth) sameReasons(o truth) bool {
	a, b := slices.Clone(t.Reasons), slices.Clone(o.Reasons)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// change is one change of a target's truth: the environment was being changed from begin to
// end (a fault injected or cleared); the zero end means the change is still in progress.
type change struct {
	begin, end time.Time
	truth      truth
	// graceUsed is set once the first round started after end has been seen: a verdict may
	// lag one round behind a change of the reasons; from the second round on it must agree.
	graceUsed bool
}

// Episode is one wrong verdict that outlasted its grace: consecutive judged rounds in which a
// target read the same wrong reason under the same truth.
type Episode struct {
	Target     TargetKey
	Kind       string // the truth's kind: the fault, "after <fault>", or "healthy"
	Expected   []checks.Reason
	Got        checks.Reason
	Message    string // the message of the first wrong round
	FirstRound uint64
	LastRound  uint64
	Rounds     int
	// Since is when the truth this episode breaks took effect; Last is when the last wrong
	// round ended: Last - Since is how long after the change the target was still wrong.
	Since, Last time.Time
	// Elsewhere lists the faults holding on other targets when the episode started.
	Elsewhere []string
	// Lie names the known verdict lie the episode matches, "" when it matches none.
	Lie string
}

// Late is how long after the truth changed the target was still wrong.
func (e Episode) Late() time.Duration { return e.Last.Sub(e.Since) }

func (e Episode) String() string {
	s := fmt.Sprintf("%s [%s]: expected %s, got %s for %d round(s) (rounds %d-%d, still wrong %s after the truth took effect): %q",
		e.Target, e.Kind, reasonList(e.Expected), e.Got, e.Rounds, e.FirstRound, e.LastRound, e.Late().Round(100*time.Millisecond), e.Message)
	if len(e.Elsewhere) > 0 {
		s += "; faults elsewhere: " + strings.Join(e.Elsewhere, ", ")
	}
	if e.Lie != "" {
		s += "; matches the known lie: " + e.Lie
	}
	return s
}

// TimestampLie is a verdict whose message says the checker made no contact with the target in
// that round while its CheckedAt moved.
type TimestampLie struct {
	Target       TargetKey
	Round        uint64
	Reason       checks.Reason
	Message      string
	Before, Then time.Time
}

func (l TimestampLie) String() string {
	return fmt.Sprintf("round %d %s: %s %q, yet CheckedAt moved %s (from %s to %s)", l.Round, l.Target, l.Reason, l.Message,
		l.Then.Sub(l.Before).Round(time.Millisecond), l.Before.Format(time.TimeOnly+".000"), l.Then.Format(time.TimeOnly+".000"))
}

func reasonList(rs []checks.Reason) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// noContact reports whether a verdict says the checker did not talk to the target in this
// round: its NotContacted flag, or, for kvm, a message of checks/kvm that says so (an abandoned
// probe still running, another probe running, a host never started before the deadline), so
// that a verdict whose message and flag disagree is caught too.
func noContact(typ checks.ProviderType, ts checks.TargetState) bool {
	if ts.NotContacted {
		return true
	}
	if typ != kvm.Type {
		return false
	}
	for _, s := range []string{
		"no new call is made until it does",
		"this one made no call",
		"not started:",
	} {
		if strings.Contains(ts.Message, s) {
			return true
		}
	}
	return false
}

// judge compares every round's verdicts with the truth table.
type judge struct {
	logf func(format string, args ...any)

	mu        sync.Mutex
	changes   map[TargetKey][]*change
	open      map[TargetKey]*Episode
	episodes  []*Episode
	lastSeen  map[TargetKey]checks.TargetState
	tsLies    []TimestampLie
	judged    int // target-rounds compared
	skipped   int // target-rounds that overlapped a change
	graced    int // target-rounds in their grace round
	lastRound uint64
	missed    int // rounds published but never observed
	rounds    int // rounds observed
}

func newJudge(logf func(format string, args ...any)) *judge {
	return &judge{
		logf:     logf,
		changes:  map[TargetKey][]*change{},
		open:     map[TargetKey]*Episode{},
		lastSeen: map[TargetKey]checks.TargetState{},
	}
}

// set records the initial truth of a target (no grace: it holds from the start).
func (j *judge) set(k TargetKey, t truth) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.changes[k] = []*change{{truth: t, graceUsed: true}}
}

// begin marks the start of a change of k's truth to t; finish(k) marks its end.
func (j *judge) begin(k TargetKey, t truth, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	cs := j.changes[k]
	c := &change{begin: at, truth: t}
	// No grace when the reasons stay the same (a key rotation, a fault whose truth is Ready):
	// nothing a checker must notice has changed, so every round after it is judged.
	if len(cs) > 0 && cs[len(cs)-1].truth.sameReasons(t) {
		c.graceUsed = true
	}
	j.changes[k] = append(cs, c)
}

func (j *judge) finish(k TargetKey, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	cs := j.changes[k]
	if len(cs) > 0 && cs[len(cs)-1].end.IsZero() {
		cs[len(cs)-1].end = at
	}
}

// faultsExcept lists the faults holding now on targets other than k.
func (j *judge) faultsExcept(k TargetKey) []string {
	var out []string
	for o, cs := range j.changes {
		if o == k {
			continue
		}
		if f := cs[len(cs)-1].truth.Fault; f != "" {
			out = append(out, o.String()+" "+f)
		}
	}
	sort.Strings(out)
	return out
}

// observe judges one snapshot.
func (j *judge) observe(snap *checks.Snapshot) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if snap.Round == 0 || snap.Round == j.lastRound {
		return
	}
	if j.lastRound != 0 && snap.Round > j.lastRound+1 {
		j.missed += int(snap.Round - j.lastRound - 1)
	}
	j.lastRound = snap.Round
	j.rounds++
	start := snap.RoundStarted
	end := start.Add(snap.RoundDuration)
	for _, p := range snap.Providers {
		for _, ts := range p.Targets {
			k := TargetKey{p.Name, ts.Target}
			j.checkTimestamp(snap.Round, k, p.Type, ts)
			j.judgeTarget(snap, k, ts, start, end)
		}
	}
}

func (j *judge) checkTimestamp(round uint64, k TargetKey, typ checks.ProviderType, ts checks.TargetState) {
	prev, ok := j.lastSeen[k]
	j.lastSeen[k] = ts
	if !ok || !noContact(typ, ts) || ts.CheckedAt.Equal(prev.CheckedAt) {
		return
	}
	l := TimestampLie{Target: k, Round: round, Reason: ts.Reason, Message: ts.Message, Before: prev.CheckedAt, Then: ts.CheckedAt}
	j.tsLies = append(j.tsLies, l)
	j.logf("soak: TIMESTAMP %s", l)
}

func (j *judge) judgeTarget(snap *checks.Snapshot, k TargetKey, ts checks.TargetState, start, end time.Time) {
	cs := j.changes[k]
	if len(cs) == 0 {
		return
	}
	// The truth in effect is the last change that ended before the round started; a change
	// that overlaps the round (or is still in progress) makes the round say nothing.
	var in *change
	for _, c := range slices.Backward(cs) {
		if c.begin.IsZero() { // the initial truth
			in = c
			break
		}
		if !c.begin.Before(end) {
			continue // made after the round ended (a snapshot judged late)
		}
		if c.end.IsZero() || c.end.After(start) {
			j.skipped++
			j.closeEpisode(k)
			return
		}
		in = c
		break
	}
	if in == nil {
		return
	}
	if !in.graceUsed {
		in.graceUsed = true
		j.graced++
		return
	}
	j.judged++
	if slices.Contains(in.truth.Reasons, ts.Reason) {
		j.closeEpisode(k)
		return
	}
	e := j.open[k]
	if e != nil && e.Got == ts.Reason && e.Kind == in.truth.kind() {
		e.LastRound, e.Last = snap.Round, end
		e.Rounds++
		return
	}
	j.closeEpisode(k)
	since := in.end
	if since.IsZero() {
		since = start
	}
	e = &Episode{
		Target: k, Kind: in.truth.kind(), Expected: in.truth.Reasons, Got: ts.Reason, Message: ts.Message,
		FirstRound: snap.Round, LastRound: snap.Round, Rounds: 1, Since: since, Last: end,
		Elsewhere: j.faultsExcept(k),
	}
	e.Lie = knownLie(e)
	j.open[k] = e
	j.episodes = append(j.episodes, e)
}

func (j *judge) closeEpisode(k TargetKey) {
	if e := j.open[k]; e != nil {
		j.logf("soak: WRONG %s", e)
		delete(j.open, k)
	}
}

// knownLie names the known verdict lie of today's code that an episode matches, from what the
// verdict says. It only labels findings; it never excuses one.
func knownLie(e *Episode) string {
	ready := slices.Contains(e.Expected, checks.ReasonReady)
	switch {
	case e.Got == checks.ReasonTimeout && !slices.Contains(e.Expected, checks.ReasonTimeout) &&
		(strings.Contains(e.Message, "not started") || strings.Contains(e.Message, "deadline came during the dial")):
		return "a hung or silent host holds one of the provider's concurrency slots for the whole round, so its neighbours read Timeout"
	case ready && strings.Contains(e.Message, "dialled again at the first check after"):
		return "the dial backoff keeps a recovered host's old reason until its next dial"
	case ready && e.Got == checks.ReasonTimeout && strings.Contains(e.Message, "has still not returned"):
		return "a probe abandoned on a link that stalled keeps a recovered host at Timeout until the stalled call returns"
	case slices.Contains(e.Expected, kvm.ReasonSSHAuthFailed) && e.Got == kvm.ReasonSSHHandshakeFailed:
		return "an authentication failure reads SSHHandshakeFailed"
	}
	return ""
}

// finish closes every open episode and returns the results.
func (j *judge) results() (episodes []Episode, tsLies []TimestampLie, stats string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k := range j.open {
		j.closeEpisode(k)
	}
	for _, e := range j.episodes {
		episodes = append(episodes, *e)
	}
	return episodes, slices.Clone(j.tsLies), fmt.Sprintf("%d rounds observed (%d missed), %d target-rounds judged, %d in their grace round, %d overlapping a change",
		j.rounds, j.missed, j.judged, j.graced, j.skipped)
}

// ByKind counts wrong target-rounds by fault kind, expected and got reason.
func ByKind(episodes []Episode) map[string]int {
	out := map[string]int{}
	for _, e := range episodes {
		out[fmt.Sprintf("%s: expected %s, got %s", e.Kind, reasonList(e.Expected), e.Got)] += e.Rounds
	}
	return out
}
