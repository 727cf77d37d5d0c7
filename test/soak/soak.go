// Package soak is a ground-truth soak of the exporter's verdicts: it runs the real round runner
// (checks.NewRunner) with the real checkers of all three provider types, built from a providers
// file the way the exporter builds them, against the real test environment (KVM hosts with sshd
// and libvirtd in network namespaces, the GCE wire server, a kube-apiserver), injects faults
// drawn at random from a seed, and compares every target's verdict in every round with what
// the fault in force says it must be. A verdict that disagrees for longer than one round after
// the truth changed is a wrong verdict, logged with its round, target, expected and got reason
// and message. At the end, once every fault has cleared, goroutines, open fds, SSH connections
// and RSS must be back at their baseline.
//
// Behind the runner runs the rest of the chain (chain.go): its metrics scraped by a real
// Prometheus evaluating the mixin's rules, a real Alertmanager with the mixin's inhibit rules and
// recommended route notifying a webhook receiver, and the ProviderHealth writer on the soak's
// API server. Every fault carries the pages it must and may cause (pages.go); each missing,
// extra or late page, late resolution, and object that disagrees with the truth for longer than
// a round and the writer's interval is a finding too.
//
// The test (soak_test.go) runs a short form in `make test` and the long form in `make soak`;
// docs/testing.md has the truth table and how to reproduce a run from its seed.
package soak

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	kubeprovider "github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// Options configures a soak run.
type Options struct {
	// Seed draws the faults; the same seed gives the same faults at the same rounds.
	Seed uint64
	// Rounds is how many rounds faults are drawn for (then every fault is cleared and the run
	// waits for every target to read Ready again).
	Rounds int
	// Interval and Timeout are the runner's (the exporter's --provider-check-interval and
	// --provider-check-timeout), test-sized.
	Interval, Timeout time.Duration
	// Hosts is how many KVM hosts the kvm provider has; Concurrency its concurrency field,
	// fewer than Hosts as in a real fleet, so that a host holding a slot can starve others.
	Hosts, Concurrency int
	// The kvm provider's dial and RPC bounds (providers-file fields), shortened so a dial fits
	// a round.
	TCPTimeout, SSHTimeout, LibvirtTimeout, RPCTimeout time.Duration
	// Factor is the factor the durations above, Settle and Scale were scaled by (Scaled); 0:
	// Run measures it on the machine (MachineFactor) and scales the options by it.
	Factor int
	// Settle bounds the wait for every target to read Ready once every fault has cleared.
	Settle time.Duration
	// Chain runs the rest of the alert chain behind the runner (chain.go): its metrics scraped by
	// a Prometheus evaluating the mixin's rules, an Alertmanager with the mixin's inhibit rules
	// and recommended route, a webhook receiver, and the ProviderHealth writer; every page and
	// every object is judged against the truth.
	Chain bool
	// MaxHold is the most rounds a fault holds (at least 6; the chain's default is longer, so
	// that faults both shorter and longer than the alerts' for: plus the chain's lag occur).
	MaxHold int
	// Scale divides every duration of the mixin and of Prometheus (see test/testenv/chain).
	Scale int
	// Logf receives the run's log (seed, every fault, every wrong verdict).
	Logf func(format string, args ...any)
}

// DefaultOptions are the test-sized settings: 2 s rounds with a 1.5 s deadline, four hosts
// checked one at a time (a fleet four times its concurrency; production's 32 slots serve
// hundreds of hosts), dial bounds that fit a round (300 ms + 700 ms + 500 ms), 500 ms an RPC;
// every one of them multiplied by the factor Run measures on the machine (MachineFactor).
func DefaultOptions() Options {
	return Options{
		Rounds:   80,
		Interval: 2 * time.Second, Timeout: 1500 * time.Millisecond,
		Hosts: 4, Concurrency: 1,
		TCPTimeout: 300 * time.Millisecond, SSHTimeout: 700 * time.Millisecond, LibvirtTimeout: 500 * time.Millisecond,
		RPCTimeout: 500 * time.Millisecond,
		Settle:     90 * time.Second,
		Chain:      true, Scale: 60, MaxHold: 12,
	}
}

// Report is the outcome of a run.
type Report struct {
	Seed   uint64
	Rounds int
	// Options are the run's, scaled by the factor measured (Options.Factor).
	Options       Options
	Actions       []Action
	Episodes      []Episode
	TimestampLies []TimestampLie
	// Uncovered lists the fault kinds the run never injected.
	Uncovered []string
	// Settled is false when some target still did not read Ready Settle after the last fault
	// cleared; NotReady lists them.
	Settled  bool
	NotReady []string
	Baseline Resources
	Final    Resources
	Leaks    []string
	Stats    string
	// Chain is the judgement of the pages and objects (nil without Options.Chain).
	Chain *ChainReport
	// Blips are soak-blip's targets at the end: how many of their checks failed while their
	// verdict, judged Ready throughout, held (the lane's proof that it saw the faults).
	Blips []Blip
}

// Blip is one soak-blip target's account: its checks, failed ones, and the faults of the host
// it shares with soak-kvm.
type Blip struct {
	Target, Shadow        TargetKey
	Checks, FailedChecks  uint64
	FailureThreshold      int
	ShadowFaults, Longest int // faults injected on the shadow, and the most rounds one held
}

// Wrong counts the target-rounds of wrong verdicts.
func (r *Report) Wrong() int {
	n := 0
	for _, e := range r.Episodes {
		n += e.Rounds
	}
	return n
}

// Names of the soak's providers and identity.
const (
	kubeProvider = "soak-kube"
	gcpProvider  = "soak-gcp"
	kvmProvider  = "soak-kvm"
	// blipProvider checks the first KVM host again, with a failureThreshold above the rounds
	// any fault holds: every fault of that host is a blip to it, which must neither turn its
	// verdict down nor page, while the same fault pages soak-kvm.
	blipProvider = "soak-blip"
	kubeUser     = "soak"
)

// env is the running test environment and what the faults need of it.
type env struct {
	opts          Options
	fleet         *kvmhost.Fleet
	gce           *gcefake.Server
	kube          *kube.Env
	kubeAdmin     kubernetes.Interface
	savedHostKeys map[int]map[string][]byte
}

// Run starts the environment, runs the soak and returns its report. A part of the environment
// this machine cannot run ends the test through testenv.Unavailable (skip, or fail under
// REQUIRE_INTEGRATION=1). Faults and verdicts are the report's; only a broken environment or
// harness fails tb here.
func Run(tb testing.TB, o Options) *Report {
	tb.Helper()
	logf := o.Logf
	if logf == nil {
		logf = tb.Logf
	}
	fleet := kvmhost.Start(tb, o.Hosts)
	if o.Factor == 0 {
		f, slowest, err := MachineFactor(fleet, o.SSHTimeout, o.Scale)
		if err != nil {
			tb.Fatalf("soak: measure the machine: %v", err)
		}
		o = o.Scaled(f)
		logf("soak: the slowest of %d healthy dials took %s: every bound of the run multiplied by %d (SSH bound %s, at least %d times it)",
			dialSamples, slowest.Round(time.Millisecond), f, o.SSHTimeout, boundMargin)
	}
	logf("soak: seed %d, %d rounds of %s (timeout %s), %d kvm hosts at concurrency %d; reproduce with -soak.seed=%d -soak.rounds=%d -soak.factor=%d",
		o.Seed, o.Rounds, o.Interval, o.Timeout, o.Hosts, o.Concurrency, o.Seed, o.Rounds, o.Factor)

	e := &env{opts: o, fleet: fleet, savedHostKeys: map[int]map[string][]byte{}}
	e.kube = kube.Start(tb)
	e.kubeAdmin = kubernetes.NewForConfigOrDie(e.kube.AdminConfig)
	e.kube.AddUser(kubeUser)
	if _, err := e.kubeAdmin.RbacV1().ClusterRoles().Create(context.Background(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: kubeRBACName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("soak: create the ClusterRole: %v", err)
	}
	if err := e.bindKubeRole(); err != nil {
		tb.Fatalf("soak: bind the ClusterRole: %v", err)
	}
	e.gce = gcefake.Start(tb)
	e.gce.AddInstances(gcefake.DefaultProject, gcefake.DefaultZones[0], 3, map[string]string{"managed-by": "proxy-operator"})

	ps := e.providers(tb)
	cs := make([]checks.Checker, len(ps))
	for i, p := range ps {
		cs[i] = p.Checker
	}
	runnerLog := slog.New(slog.NewTextHandler(&lineWriter{logf: logf, prefix: "runner: "}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := checks.NewRunner(checks.Options{Interval: o.Interval, Timeout: o.Timeout, Logger: runnerLog}, nil)
	r.SetProviders(ps)

	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	tb.Cleanup(func() {
		cancel()
		bg.Wait()
		for _, c := range cs {
			if cl, ok := c.(io.Closer); ok {
				_ = cl.Close()
			}
		}
	})
	bg.Go(func() { r.Run(ctx) })

	// Lanes to targets.
	keys := map[string][]TargetKey{}
	var blip []TargetKey // no lane's: its truth stays Ready
	for _, c := range cs {
		lane := map[checks.ProviderType]string{kubeprovider.Type: laneKube, gcp.Type: laneGCP, kvm.Type: laneKVM}[c.Type()]
		for _, t := range c.Targets() {
			if c.Name() == blipProvider {
				blip = append(blip, TargetKey{c.Name(), t})
				continue
			}
			keys[lane] = append(keys[lane], TargetKey{c.Name(), t})
		}
	}
	var all []TargetKey
	for _, l := range []string{laneKube, laneGCP, laneKVM} {
		all = append(all, keys[l]...)
	}
	all = append(all, blip...)

	j := newJudge(logf)
	var observed atomic.Uint64
	roundSeen := make(chan struct{}, 1)
	sub := r.Subscribe(ctx)
	bg.Go(func() {
		for range sub {
			snap := r.Current()
			j.observe(snap)
			observed.Store(snap.Round)
			select {
			case roundSeen <- struct{}{}:
			default:
			}
		}
	})
	waitRound := func(n uint64, what string) {
		tb.Helper()
		deadline := time.After(30*o.Interval + time.Minute)
		for observed.Load() < n {
			select {
			case <-roundSeen:
			case <-deadline:
				tb.Fatalf("soak: waiting for round %d (%s): the runner published no round since %d", n, what, observed.Load())
			}
		}
	}

	targets := map[string][]string{}
	for _, k := range all {
		targets[k.Provider] = append(targets[k.Provider], k.Target)
	}
	var ch *chainRun
	if o.Chain {
		ch = e.startChain(tb, ctx, &bg, r, logf)
		ch.timing.Shadows = map[TargetKey]TargetKey{}
		for _, k := range blip {
			ch.timing.Shadows[k] = TargetKey{kvmProvider, k.Target}
		}
	}

	// Warm-up: every target Ready (in Prometheus and in the objects too), then the baseline.
	if ok, notReady := waitAllReady(r, all, time.Minute, waitRound); !ok {
		tb.Fatalf("soak: the environment is not healthy before any fault: %s", strings.Join(notReady, "; "))
	}
	if ch != nil {
		ch.waitReady(tb, all, 2*time.Minute)
	}
	for _, k := range all {
		j.set(k, truth{Reasons: []checks.Reason{checks.ReasonReady}})
	}
	waitRound(observed.Load()+2, "warm-up")
	base := e.measure()
	logf("soak: baseline after warm-up (round %d): %s", observed.Load(), base)
	if want := o.Hosts + len(blip); base.SSHOnHosts != want || base.SSHFromHere != want {
		tb.Fatalf("soak: the baseline has %d SSH connections on the hosts and %d from here, want one per host and one more for %s (%d): the counters do not see the pool", base.SSHOnHosts, base.SSHFromHere, blipProvider, want)
	}

	// The faults.
	rep := &Report{Seed: o.Seed, Rounds: o.Rounds, Options: o, Baseline: base}
	sched := newSchedule(o.Seed, o.Hosts, o.MaxHold)
	errs := make(chan error, 16)
	// Actions on one target run one at a time and in the schedule's order: each waits for the
	// end of the one before it (an asynchronous apply still running must not be overtaken by
	// its clear, or the fault would stay on).
	laneDone := map[TargetKey]chan struct{}{}
	var async sync.WaitGroup
	do := func(a Action) {
		tb.Helper()
		a.Round = observed.Load()
		rep.Actions = append(rep.Actions, a)
		logf("soak: %s", a)
		if a.Index < 0 { // the fleet-wide rotation
			now := time.Now()
			for _, k := range keys[laneKVM] {
				j.begin(k, truth{After: a.Kind.Name, Reasons: a.Kind.Reasons}, now)
			}
			e.rotateClientKey()
			now = time.Now()
			for _, k := range keys[laneKVM] {
				j.finish(k, now)
			}
			return
		}
		k := keys[a.Kind.Lane][a.Index]
		t := truth{Fault: a.Kind.Name, Reasons: a.Kind.Reasons}
		op := func(e *env, i int) error { return a.Kind.apply(e, i, a.Variant) }
		if a.Clear {
			t, op = truth{After: a.Kind.Name, Reasons: []checks.Reason{checks.ReasonReady}}, a.Kind.clear
		}
		prev, done := laneDone[k], make(chan struct{})
		laneDone[k] = done
		run := func() error {
			defer close(done)
			if prev != nil {
				<-prev
			}
			j.begin(k, t, time.Now())
			defer func() {
				end := time.Now()
				if a.Clear {
					end = end.Add(a.Kind.settle)
				}
				j.finish(k, end)
			}()
			if err := op(e, a.Index); err != nil {
				return fmt.Errorf("%s: %w", a, err)
			}
			return nil
		}
		if !a.Kind.async {
			if err := run(); err != nil {
				tb.Fatalf("soak: %v", err)
			}
			return
		}
		async.Go(func() {
			if err := run(); err != nil {
				errs <- err
			}
		})
	}
	checkErrs := func() {
		tb.Helper()
		select {
		case err := <-errs:
			tb.Fatalf("soak: %v", err)
		default:
		}
	}
	first := observed.Load()
	for n := uint64(1); n <= uint64(o.Rounds); n++ {
		waitRound(first+n, "the schedule")
		checkErrs()
		for _, a := range sched.step(n) {
			do(a)
		}
	}
	for _, a := range sched.held(uint64(o.Rounds) + 1) {
		do(a)
	}
	async.Wait()
	checkErrs()
	rep.Uncovered = sched.uncovered()

	// Recovery: every target Ready again, then everything back to its baseline.
	settleStart := time.Now()
	rep.Settled, rep.NotReady = waitAllReady(r, all, o.Settle, waitRound)
	logf("soak: every fault cleared; every target Ready: %v after %s %s", rep.Settled, time.Since(settleStart).Round(time.Second), strings.Join(rep.NotReady, "; "))
	waitRound(observed.Load()+2, "the recovery")
	// Connections and goroutines of abandoned calls end on their own schedule (keepalives,
	// idle timeouts): give them a while before calling anything a leak.
	leakDeadline := time.Now().Add(30 * time.Second)
	for {
		rep.Final = e.measure()
		rep.Leaks = leaks(base, rep.Final)
		if inFlight := e.gce.InFlight(); inFlight != 0 {
			rep.Leaks = append(rep.Leaks, fmt.Sprintf("GCE requests still in flight: %d", inFlight))
		}
		if len(rep.Leaks) == 0 || time.Now().After(leakDeadline) {
			break
		}
		time.Sleep(o.Interval)
	}
	logf("soak: final: %s", rep.Final)
	if ch != nil {
		// The last pages resolve a lag and a notification after the last clear.
		t := ch.timing
		ch.waitQuiet(t.Lag() + t.Eval + t.Notify() + 30*time.Second)
	}
	end := time.Now()
	cancel()
	bg.Wait()
	rep.Episodes, rep.TimestampLies, rep.Stats = j.results()
	final := r.Current()
	for _, k := range blip {
		b := Blip{Target: k, Shadow: TargetKey{kvmProvider, k.Target}, FailureThreshold: o.blipThreshold()}
		if ts := find(final, k); ts != nil {
			b.Checks, b.FailedChecks = ts.Checks, ts.FailedChecks
		}
		injected := map[*FaultKind]uint64{}
		for _, a := range rep.Actions {
			if a.Index < 0 || a.Kind.Lane != laneKVM || keys[laneKVM][a.Index] != b.Shadow {
				continue
			}
			if !a.Clear {
				b.ShadowFaults++
				injected[a.Kind] = a.Step
			} else if from, ok := injected[a.Kind]; ok {
				b.Longest = max(b.Longest, int(a.Step-from))
			}
		}
		rep.Blips = append(rep.Blips, b)
	}
	if ch != nil {
		rep.Chain = ch.finish(j, targets, end, rep.Episodes)
	}
	return rep
}

// blipThreshold is soak-blip's failureThreshold: more rounds than a fault holds, and than the
// rounds overlapping its injection and its clearing.
func (o Options) blipThreshold() int { return max(o.MaxHold, maxHold) + 3 }

// providers writes the providers file and builds its checkers and thresholds as the exporter
// does.
func (e *env) providers(tb testing.TB) []checks.Provider {
	tb.Helper()
	o := e.opts
	kc := e.fleet.KVMConfig()
	// kvm is a kvm provider's block: the fleet's identity and dial bounds, its own
	// failureThreshold and hosts.
	kvm := func(name string, failureThreshold int, hosts []testenv.KVMTarget) string {
		var b strings.Builder
		fmt.Fprintf(&b, `  - name: %s
    type: kvm
    failureThreshold: %d
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      concurrency: %d
      tcpTimeout: %s
      sshTimeout: %s
      libvirtTimeout: %s
      rpcTimeout: %s
      hosts:
`, name, failureThreshold, kc.User, kc.PrivateKeyFile, kc.KnownHostsFile, kc.Socket, kc.StoragePool,
			o.Concurrency, o.TCPTimeout, o.SSHTimeout, o.LibvirtTimeout, o.RPCTimeout)
		for _, h := range hosts {
			fmt.Fprintf(&b, "        - {address: %q, name: %s}\n", h.Address, h.Name)
		}
		return b.String()
	}
	yml := fmt.Sprintf(`providers:
  - name: %s
    type: kubernetes
    kubernetes:
      kubeconfig: %s
      labelSelector: ""
  - name: %s
    type: gcp
    gcp:
      project: %s
      credentialsFile: %s
      endpoint: %s
`, kubeProvider, e.kube.KubeconfigFor(kubeUser),
		gcpProvider, gcefake.DefaultProject, e.gce.ServiceAccountKey(tb), e.gce.URL())
	yml += kvm(kvmProvider, 1, kc.Hosts) + kvm(blipProvider, o.blipThreshold(), kc.Hosts[:1])
	path := filepath.Join(tb.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		tb.Fatalf("soak: the providers file does not load: %v\n%s", err, yml)
	}
	var ps []checks.Provider
	for _, p := range cfg.Providers {
		t, _ := checks.Lookup(checks.ProviderType(p.Type))
		c, err := t.New(p, slog.New(slog.DiscardHandler).With("provider", p.Name))
		if err != nil {
			tb.Fatalf("soak: build the %s checker: %v", p.Name, err)
		}
		ps = append(ps, checks.Provider{Checker: c, Thresholds: checks.Thresholds{Failure: p.FailureThreshold, Success: p.SuccessThreshold}})
	}
	return ps
}

func (e *env) measure() Resources {
	// RSS counts what the process holds, not the high-water mark of its busiest round, which
	// Go returns to the OS only lazily: collect and return first.
	debug.FreeOSMemory()
	r := Resources{Goroutines: goroutines(), FDs: openFDs(), SSHFromHere: sshFromHere(), RSS: rss()}
	for _, h := range e.fleet.Hosts {
		r.SSHOnHosts += h.TCPConnections()
	}
	return r
}

// waitAllReady waits, round by round, until a snapshot has every target Ready; it returns the
// targets that were not in the last snapshot seen when timeout passes first.
func waitAllReady(r *checks.Runner, all []TargetKey, timeout time.Duration, waitRound func(uint64, string)) (bool, []string) {
	deadline := time.Now().Add(timeout)
	for {
		snap := r.Current()
		var notReady []string
		for _, k := range all {
			ts := find(snap, k)
			switch {
			case ts == nil:
				notReady = append(notReady, k.String()+": no verdict yet")
			case !ts.Up:
				notReady = append(notReady, fmt.Sprintf("%s: %s %q", k, ts.Reason, ts.Message))
			}
		}
		if len(notReady) == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, notReady
		}
		waitRound(snap.Round+1, "every target Ready")
	}
}

func find(snap *checks.Snapshot, k TargetKey) *checks.TargetState {
	for i := range snap.Providers {
		p := &snap.Providers[i]
		if p.Name != k.Provider {
			continue
		}
		if i := slices.IndexFunc(p.Targets, func(t checks.TargetState) bool { return t.Target == k.Target }); i >= 0 {
			return &p.Targets[i]
		}
	}
	return nil
}

// lineWriter hands each line written to it to logf.
type lineWriter struct {
	logf   func(format string, args ...any)
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.logf("%s%s", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}
