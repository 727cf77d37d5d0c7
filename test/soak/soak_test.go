package soak

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

var (
	flagRounds      = flag.Int("soak.rounds", 0, "rounds of faults (0: the short form's, see DefaultOptions; make soak: 1000)")
	flagSeed        = flag.Uint64("soak.seed", 0, "seed of the faults (0: a new one, logged)")
	flagInterval    = flag.Duration("soak.interval", 0, "round interval (0: DefaultOptions')")
	flagConcurrency = flag.Int("soak.concurrency", 0, "the kvm provider's concurrency (0: DefaultOptions')")
	flagScale       = flag.Int("soak.scale", 0, "divide every duration of the mixin and Prometheus by this (0: DefaultOptions')")
	flagFactor      = flag.Int("soak.factor", 0, "multiply every bound of the run by this (0: measured on the machine, see MachineFactor; 1: DefaultOptions' as they are)")
	flagChain       = flag.Bool("soak.chain", true, "run the alert chain and the ProviderHealth writer behind the runner and judge pages and objects")
)

// TestSoak drives the real runner and checkers against the real environment under seeded faults
// and fails on every wrong verdict that outlasted one round, on every timestamp that moved for a
// host the checker did not contact, on leaks, and when the short form did not cover the matrix.
func TestSoak(t *testing.T) {
	o := DefaultOptions()
	if *flagRounds > 0 {
		o.Rounds = *flagRounds
	}
	if *flagInterval > 0 {
		o.Interval = *flagInterval
		o.Timeout = *flagInterval * 3 / 4
		o.Factor = 1
	}
	if *flagConcurrency > 0 {
		o.Concurrency = *flagConcurrency
	}
	o.Chain = *flagChain
	if !o.Chain {
		o.MaxHold = 0 // the verdicts' own schedule
	}
	if *flagScale > 0 {
		o.Scale = *flagScale
	}
	if *flagFactor > 0 {
		if o.Scale%*flagFactor != 0 {
			t.Fatalf("-soak.factor=%d: must divide the scale (%d)", *flagFactor, o.Scale)
		}
		o = o.Scaled(*flagFactor)
	}
	o.Seed = *flagSeed
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	rep := Run(t, o)

	t.Logf("soak: seed %d: %s", rep.Seed, rep.Stats)
	t.Logf("soak: %d actions; baseline %s; final %s", len(rep.Actions), rep.Baseline, rep.Final)
	repro := fmt.Sprintf("reproduce: go test -race -count=1 -run '^TestSoak$' -v ./test/soak -soak.seed=%d -soak.rounds=%d", rep.Seed, rep.Rounds)
	if *flagInterval == 0 {
		repro += fmt.Sprintf(" -soak.factor=%d", rep.Options.Factor)
	}
	if *flagInterval > 0 {
		repro += " -soak.interval=" + flagInterval.String()
	}
	if *flagConcurrency > 0 {
		repro += fmt.Sprintf(" -soak.concurrency=%d", *flagConcurrency)
	}
	if *flagScale > 0 {
		repro += fmt.Sprintf(" -soak.scale=%d", *flagScale)
	}
	if !*flagChain {
		repro += " -soak.chain=false"
	}

	if len(rep.Episodes) > 0 {
		kinds := ByKind(rep.Episodes)
		var lines []string
		for k, n := range kinds {
			lines = append(lines, fmt.Sprintf("  %4d round(s)  %s", n, k))
		}
		sort.Strings(lines)
		lies := map[string]int{}
		for _, e := range rep.Episodes {
			lie := e.Lie
			if lie == "" {
				lie = "no known lie matches: a new finding"
			}
			lies[lie] += e.Rounds
		}
		var lieLines []string
		for l, n := range lies {
			lieLines = append(lieLines, fmt.Sprintf("  %4d round(s)  %s", n, l))
		}
		sort.Strings(lieLines)
		var eps []string
		for _, e := range rep.Episodes {
			eps = append(eps, "  "+e.String())
		}
		t.Errorf("%d wrong verdict(s) outlasted one round (goal 0), %d target-rounds in all.\nBy kind (fault kind: expected, got):\n%s\nBy lie:\n%s\nEvery one:\n%s\n%s",
			len(rep.Episodes), rep.Wrong(), strings.Join(lines, "\n"), strings.Join(lieLines, "\n"), strings.Join(eps, "\n"), repro)
	}
	if n := len(rep.TimestampLies); n > 0 {
		show := rep.TimestampLies[:min(n, 10)]
		var lines []string
		for _, l := range show {
			lines = append(lines, "  "+l.String())
		}
		t.Errorf("%d verdict(s) moved CheckedAt in a round where the checker says it made no contact with the host "+
			"(the known lie: timestamps move for hosts not contacted; the verdict's NotContacted flag or its message says so); the first %d:\n%s\n%s",
			n, len(show), strings.Join(lines, "\n"), repro)
	}
	if !rep.Settled {
		t.Errorf("targets still not Ready %s after every fault cleared: %s\n%s", rep.Options.Settle, strings.Join(rep.NotReady, "; "), repro)
	}
	if len(rep.Leaks) > 0 {
		t.Errorf("not back at the baseline after every fault cleared (baseline %s):\n  %s\n%s", rep.Baseline, strings.Join(rep.Leaks, "\n  "), repro)
	}
	if c := rep.Chain; c != nil {
		t.Logf("soak: chain: %s", c.Summary())
		for _, p := range c.Pages.Pages {
			t.Logf("soak: page: %s", p)
		}
		if f := c.Failures(); len(f) > 0 {
			t.Errorf("the alert chain and the objects disagree with the truth (goal 0 of each): %s\n  %s\n%s", c.Summary(), strings.Join(f, "\n  "), repro)
		}
	}
	for _, b := range rep.Blips {
		t.Logf("soak: %s (failureThreshold %d): %d of %d checks failed, in %d faults of %s (the longest %d steps), its verdict judged Ready throughout",
			b.Target, b.FailureThreshold, b.FailedChecks, b.Checks, b.ShadowFaults, b.Shadow, b.Longest)
		if b.ShadowFaults > 0 && b.FailedChecks == 0 {
			t.Errorf("%s: none of its checks failed in %d faults of the host it shares with %s: the lane saw no blip and proves nothing", b.Target, b.ShadowFaults, b.Shadow)
		}
		if b.Longest >= b.FailureThreshold-2 {
			t.Errorf("%s: a fault of %s held %d steps, too close to its failureThreshold %d for a blip", b.Target, b.Shadow, b.Longest, b.FailureThreshold)
		}
	}
	if o.Rounds >= DefaultOptions().Rounds && len(rep.Uncovered) > 0 {
		t.Errorf("fault kinds never injected in %d rounds: %s", o.Rounds, strings.Join(rep.Uncovered, ", "))
	}
}

// TestScheduleIsReproducible: the same seed gives the same actions; another seed other ones.
func TestScheduleIsReproducible(t *testing.T) {
	run := func(seed uint64) string {
		s := newSchedule(seed, 4, 0)
		var b strings.Builder
		for r := uint64(1); r <= 200; r++ {
			for _, a := range s.step(r) {
				fmt.Fprintln(&b, a)
			}
		}
		return b.String()
	}
	a, b, c := run(42), run(42), run(43)
	if a != b {
		t.Error("seed 42 gave two different schedules")
	}
	if a == c {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
	if !strings.Contains(a, "inject") || !strings.Contains(a, "clear") {
		t.Errorf("the schedule injects or clears nothing:\n%s", a)
	}
}

// TestScheduleCoversEveryKind: whatever the seed, the short form's rounds inject every fault
// kind, the key rotation included, and every fault holds long enough to be judged.
func TestScheduleCoversEveryKind(t *testing.T) {
	o := DefaultOptions()
	for seed := uint64(1); seed <= 500; seed++ {
		s := newSchedule(seed, o.Hosts, o.MaxHold)
		injected := map[string]uint64{}
		for r := uint64(1); r <= uint64(o.Rounds); r++ {
			for _, a := range s.step(r) {
				key := fmt.Sprint(a.Kind.Lane, a.Index)
				switch {
				case a.Index < 0:
				case !a.Clear:
					injected[key] = r
				default:
					if held := r - injected[key]; held < minHold {
						t.Fatalf("seed %d: %s held %d rounds, want at least %d", seed, a, held, minHold)
					}
				}
			}
		}
		if u := s.uncovered(); len(u) > 0 {
			t.Fatalf("seed %d: %d rounds never inject %s", seed, o.Rounds, strings.Join(u, ", "))
		}
	}
}

// TestJudge feeds the judge snapshots by hand: a verdict may lag one round behind a change of
// the truth, not two; a round overlapping a change is not judged; a neighbour's wrong verdict
// counts at once; a moved timestamp on a no-contact verdict is a timestamp lie.
func TestJudge(t *testing.T) {
	var logs []string
	j := newJudge(func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
	hv1, hv2 := TargetKey{"kvm", "hv1"}, TargetKey{"kvm", "hv2"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(round int) time.Time { return t0.Add(time.Duration(round) * 2 * time.Second) }
	j.set(hv1, truth{Reasons: []checks.Reason{checks.ReasonReady}})
	j.set(hv2, truth{Reasons: []checks.Reason{checks.ReasonReady}})
	type v struct {
		reason       checks.Reason
		msg          string
		at           time.Time
		notContacted bool
	}
	round := func(n int, a, b v) {
		snap := &checks.Snapshot{Round: uint64(n), RoundStarted: at(n), RoundDuration: 1500 * time.Millisecond,
			Providers: []checks.ProviderState{{Name: "kvm", Type: "kvm", Targets: []checks.TargetState{
				{TargetResult: checks.TargetResult{Target: "hv1", Reason: a.reason, Up: a.reason == checks.ReasonReady, Message: a.msg, CheckedAt: a.at, NotContacted: a.notContacted}},
				{TargetResult: checks.TargetResult{Target: "hv2", Reason: b.reason, Up: b.reason == checks.ReasonReady, Message: b.msg, CheckedAt: b.at, NotContacted: b.notContacted}},
			}}}}
		j.observe(snap)
	}
	ready := func(n int) v { return v{checks.ReasonReady, "ok", at(n).Add(time.Second), false} }
	round(1, ready(1), ready(1))
	// hv1's sshd stops during round 2 (not judged), round 3 is its grace, round 4 must agree.
	j.begin(hv1, truth{Fault: "sshd-stopped", Reasons: []checks.Reason{kvm.ReasonTCPUnreachable}}, at(2).Add(100*time.Millisecond))
	j.finish(hv1, at(2).Add(200*time.Millisecond))
	round(2, ready(2), ready(2))
	round(3, ready(3), v{checks.ReasonTimeout, "not started: the round's deadline came", at(3), false}) // hv1 graced; hv2 wrong at once
	round(4, v{kvm.ReasonTCPUnreachable, "refused", at(4), false}, ready(4))
	// Cleared during round 5; rounds 6 (grace) and 7, 8 still backing off: one episode of 2 rounds.
	j.begin(hv1, truth{After: "sshd-stopped", Reasons: []checks.Reason{checks.ReasonReady}}, at(5).Add(100*time.Millisecond))
	j.finish(hv1, at(5).Add(200*time.Millisecond))
	backoff := func(n int) v {
		// Flagged as uncontacted (its message alone would not say so).
		return v{kvm.ReasonTCPUnreachable, "refused; dialled again at the first check after 00:00:30 UTC", at(n).Add(time.Second), true}
	}
	round(5, backoff(5), ready(5))
	round(6, backoff(6), ready(6))
	round(7, backoff(7), ready(7))
	round(8, backoff(8), ready(8))
	round(9, ready(9), ready(9))

	eps, lies, _ := j.results()
	if len(eps) != 2 {
		t.Fatalf("%d episodes, want 2: %v\n%s", len(eps), eps, strings.Join(logs, "\n"))
	}
	if e := eps[0]; e.Target != hv2 || e.Got != checks.ReasonTimeout || e.Rounds != 1 || e.FirstRound != 3 || e.Kind != "healthy" ||
		!strings.Contains(e.Lie, "concurrency slots") || len(e.Elsewhere) != 1 {
		t.Errorf("first episode: %s", e)
	}
	if e := eps[1]; e.Target != hv1 || e.Got != kvm.ReasonTCPUnreachable || e.Rounds != 2 || e.FirstRound != 7 || e.LastRound != 8 ||
		e.Kind != "after sshd-stopped" || !strings.Contains(e.Lie, "backoff") {
		t.Errorf("second episode: %s", e)
	}
	// hv2's "not started" in round 3 (its message) and hv1's uncontacted verdicts in rounds 5 to 8
	// (their flag) each moved CheckedAt.
	var got []uint64
	for _, l := range lies {
		got = append(got, l.Round)
	}
	if fmt.Sprint(got) != "[3 5 6 7 8]" {
		t.Errorf("timestamp lies in rounds %v, want [3 5 6 7 8]: %v", got, lies)
	}
}

// TestLeaks: each measure is held to its tolerance; SSH connections must come back exactly.
func TestLeaks(t *testing.T) {
	base := Resources{Goroutines: 60, FDs: 30, SSHOnHosts: 4, SSHFromHere: 4, RSS: 100 << 20}
	if l := leaks(base, base); len(l) != 0 {
		t.Errorf("the baseline itself leaks: %v", l)
	}
	within := base
	within.Goroutines += tolGoroutines
	within.FDs += tolFDs
	within.RSS += tolRSS
	if l := leaks(base, within); len(l) != 0 {
		t.Errorf("at the tolerances: %v", l)
	}
	for name, now := range map[string]Resources{
		"goroutines":      {Goroutines: 60 + tolGoroutines + 1, FDs: 30, SSHOnHosts: 4, SSHFromHere: 4, RSS: 100 << 20},
		"descriptors":     {Goroutines: 60, FDs: 30 + tolFDs + 1, SSHOnHosts: 4, SSHFromHere: 4, RSS: 100 << 20},
		"on the hosts":    {Goroutines: 60, FDs: 30, SSHOnHosts: 5, SSHFromHere: 4, RSS: 100 << 20},
		"exporter's side": {Goroutines: 60, FDs: 30, SSHOnHosts: 4, SSHFromHere: 3, RSS: 100 << 20},
		"RSS":             {Goroutines: 60, FDs: 30, SSHOnHosts: 4, SSHFromHere: 4, RSS: 100<<20 + tolRSS + 1},
	} {
		if l := leaks(base, now); len(l) != 1 || !strings.Contains(l[0], name) {
			t.Errorf("%s: %v, want one leak naming it", name, l)
		}
	}
	if n := sshFromHere(); n < 0 {
		t.Errorf("sshFromHere: cannot read /proc/net/tcp")
	}
	if rss() == 0 || openFDs() <= 0 {
		t.Errorf("rss %d, fds %d: /proc/self is not readable", rss(), openFDs())
	}
}

// TestScaledAndPickFactor: a factor multiplies every bound and divides the mixin's scale, and
// the factor picked is the smallest that puts the SSH bound boundMargin times above the
// slowest dial, among the divisors of the scale.
func TestScaledAndPickFactor(t *testing.T) {
	o := DefaultOptions()
	s := o.Scaled(3)
	if s.Interval != 3*o.Interval || s.Timeout != 3*o.Timeout || s.TCPTimeout != 3*o.TCPTimeout || s.SSHTimeout != 3*o.SSHTimeout ||
		s.LibvirtTimeout != 3*o.LibvirtTimeout || s.RPCTimeout != 3*o.RPCTimeout || s.Settle != 3*o.Settle || s.Scale != o.Scale/3 || s.Factor != 3 {
		t.Errorf("Scaled(3) = %+v, from %+v", s, o)
	}
	if s := o.Scaled(1); s.Interval != o.Interval || s.Factor != 1 {
		t.Errorf("Scaled(1) = %+v, want the options as they are, factor 1", s)
	}
	ms := time.Millisecond
	for _, c := range []struct {
		slowest time.Duration
		scale   int
		want    int
	}{
		{20 * ms, 60, 1},  // 700 ms >= 100 ms
		{140 * ms, 60, 1}, // 700 ms >= 700 ms
		{141 * ms, 60, 2}, // 1.4 s >= 705 ms
		{400 * ms, 60, 3}, // 2.1 s >= 2 s
		{500 * ms, 60, 4}, // 2.8 s >= 2.5 s
		{10 * time.Second, 60, 6},
		{400 * ms, 8, 4}, // 3 does not divide 8
		{10 * time.Second, 7, 1},
	} {
		if got := pickFactor(c.slowest, 700*ms, c.scale); got != c.want {
			t.Errorf("pickFactor(%s, 700ms, %d) = %d, want %d", c.slowest, c.scale, got, c.want)
		}
	}
}
