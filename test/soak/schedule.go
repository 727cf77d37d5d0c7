package soak

import (
	"fmt"
	"math/rand/v2"
)

// Action is one step of the schedule: inject (or clear) a fault kind on target Index of its lane.
// The fleet-wide key rotation has Index -1.
type Action struct {
	// Step is the schedule's step (the n-th round of faults), what the seed reproduces; Round
	// is the runner's round after which the action was taken (warm-up rounds included).
	Step  uint64
	Round uint64
	Kind  *FaultKind
	Index int
	Clear bool
	// Variant is the form of the fault drawn for this injection (see FaultKind.Variants).
	Variant string
}

func (a Action) String() string {
	verb := "inject"
	if a.Clear {
		verb = "clear"
	}
	name := a.Kind.Name
	if a.Variant != "" {
		name += " (" + a.Variant + ")"
	}
	if a.Index < 0 {
		return fmt.Sprintf("step %d (after round %d): %s %s on every kvm host", a.Step, a.Round, verb, a.Kind.Name)
	}
	return fmt.Sprintf("step %d (after round %d): %s %s on %s[%d]", a.Step, a.Round, verb, name, a.Kind.Lane, a.Index)
}

// Timing of the schedule, in rounds. A fault holds for at least minHold rounds so that, after
// the round that overlaps its injection and the one round of grace, at least one round is
// judged against it; a target stays healthy for at least minRest rounds after a fault cleared
// so that its recovery is judged too.
const (
	minHold, maxHold = 3, 6
	minRest, maxRest = 3, 4
	// injectChance is the chance per round that an idle lane gets a fault once every kind of
	// its lane has been injected at least once (before that, an idle lane always gets one, the
	// least-used kinds first, so that a short run covers the whole matrix).
	injectChance = 0.4
	// rotateChance is the chance per round of rotating the client key while no kvm host has a fault.
	rotateChance = 0.08
)

type laneState struct {
	lane   string
	index  int
	kind   *FaultKind // nil when idle
	until  uint64     // the round the fault is cleared at (held) or the lane may get one (idle)
	choice []*FaultKind
}

// schedule draws faults from a seeded source: the same seed and host count give the same
// actions at the same rounds, whatever the timing of the run.
type schedule struct {
	rng      *rand.Rand
	lanes    []*laneState
	used     map[*FaultKind]int
	rotUntil uint64 // no kvm fault starts before this round (a rotation's aftermath)
	maxHold  int    // the longest a fault holds, in rounds
}

// newSchedule returns the schedule of a seed; faults hold minHold to hold rounds (at least
// maxHold).
func newSchedule(seed uint64, hosts, hold int) *schedule {
	s := &schedule{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), used: map[*FaultKind]int{}, maxHold: max(hold, maxHold)}
	s.lanes = append(s.lanes, &laneState{lane: laneKube, choice: kindsOf(laneKube), until: 1})
	s.lanes = append(s.lanes, &laneState{lane: laneGCP, choice: kindsOf(laneGCP), until: 1})
	for i := range hosts {
		s.lanes = append(s.lanes, &laneState{lane: laneKVM, index: i, choice: kindsOf(laneKVM), until: 1})
	}
	return s
}

// Uncovered lists the kinds never injected so far.
func (s *schedule) uncovered() []string {
	var out []string
	for _, k := range append(Kinds[:len(Kinds):len(Kinds)], rotationKind) {
		if s.used[k] == 0 {
			out = append(out, k.Name)
		}
	}
	return out
}

// laneCovered reports whether every kind of a lane has been injected at least once.
func (s *schedule) laneCovered(lane string) bool {
	for _, k := range kindsOf(lane) {
		if s.used[k] == 0 {
			return false
		}
	}
	return true
}

// step returns the actions of round r (called once per round, in order).
func (s *schedule) step(r uint64) []Action {
	var out []Action
	for _, l := range s.lanes {
		if l.kind != nil && r >= l.until {
			out = append(out, Action{Step: r, Kind: l.kind, Index: l.index, Clear: true})
			l.kind = nil
			l.until = r + uint64(minRest+s.rng.IntN(maxRest-minRest+1))
		}
	}
	// The rotation touches every host: only while none has a fault, and never while a host is
	// still recovering (the round it is judged in would be the rotation's too). Once the kvm
	// kinds are covered, a rotation not yet made holds new kvm faults back until it is.
	kvmIdle := true
	for _, l := range s.lanes {
		if l.lane == laneKVM && (l.kind != nil || r < l.until) {
			kvmIdle = false
		}
	}
	rotationDue := s.used[rotationKind] == 0 && s.laneCovered(laneKVM)
	if kvmIdle && r >= s.rotUntil && (rotationDue || s.rng.Float64() < rotateChance) {
		s.used[rotationKind]++
		s.rotUntil = r + minRest
		for _, l := range s.lanes {
			if l.lane == laneKVM {
				l.until = max(l.until, s.rotUntil)
			}
		}
		out = append(out, Action{Step: r, Kind: rotationKind, Index: -1})
	}
	for _, l := range s.lanes {
		if l.kind != nil || r < l.until || (l.lane == laneKVM && (r < s.rotUntil || rotationDue)) {
			continue
		}
		covering := !s.laneCovered(l.lane)
		if !covering && s.rng.Float64() >= injectChance {
			continue
		}
		k := s.pick(l.choice, covering)
		s.used[k]++
		l.kind = k
		l.until = r + uint64(minHold+s.rng.IntN(s.maxHold-minHold+1))
		a := Action{Step: r, Kind: k, Index: l.index}
		if len(k.Variants) > 0 {
			a.Variant = k.Variants[s.rng.IntN(len(k.Variants))]
		}
		out = append(out, a)
	}
	return out
}

// pick draws a kind: while covering, among the least-used ones.
func (s *schedule) pick(choice []*FaultKind, covering bool) *FaultKind {
	if !covering {
		return choice[s.rng.IntN(len(choice))]
	}
	least := -1
	var cands []*FaultKind
	for _, k := range choice {
		switch n := s.used[k]; {
		case least < 0 || n < least:
			least, cands = n, []*FaultKind{k}
		case n == least:
			cands = append(cands, k)
		}
	}
	return cands[s.rng.IntN(len(cands))]
}

// held lists the faults still held (to clear at the end).
func (s *schedule) held(r uint64) []Action {
	var out []Action
	for _, l := range s.lanes {
		if l.kind != nil {
			out = append(out, Action{Step: r, Kind: l.kind, Index: l.index, Clear: true})
			l.kind = nil
		}
	}
	return out
}
