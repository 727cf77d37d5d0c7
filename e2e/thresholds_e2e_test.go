package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/collector"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// scheduledChecker runs the real checker of a provider, causing before its n-th check (from 1)
// the real fault the test scheduled for it, so that which check meets which fault does not
// depend on timing. The fault for check n is caused as soon as check n-1 has returned, between
// rounds, and check n waits for it to be in place, so that a slow fault (stopping a daemon on a
// busy machine) does not eat into the round's deadline. Before each check it also keeps the
// snapshot the previous round published (rounds never overlap, so that is the round just
// finished).
type scheduledChecker struct {
	checks.Checker
	before  map[int]func()
	current func() *checks.Snapshot
	// page, when set, renders the status page, which shows the snapshot current then: it is
	// kept with each snapshot.
	page func() string

	mu    sync.Mutex
	calls int
	seen  []*checks.Snapshot
	pages []string
	ready chan struct{} // closed when the fault for the next check is in place
}

func (s *scheduledChecker) Check(ctx context.Context) []checks.TargetResult {
	s.mu.Lock()
	s.calls++
	n := s.calls
	if n > 1 {
		s.seen = append(s.seen, s.current())
		if s.page != nil {
			s.pages = append(s.pages, s.page())
		}
	}
	ready := s.ready
	s.mu.Unlock()
	if ready == nil {
		ready = s.cause(n)
	}
	<-ready
	defer func() {
		s.mu.Lock()
		s.ready = s.cause(n + 1)
		s.mu.Unlock()
	}()
	return s.Checker.Check(ctx)
}

// Close closes the real checker (the exporter closes the checkers it built at its end).
func (s *scheduledChecker) Close() error {
	if c, ok := s.Checker.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// cause starts the fault scheduled for check n and returns a channel closed once it is in place.
func (s *scheduledChecker) cause(n int) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if f := s.before[n]; f != nil {
			f()
		}
	}()
	return done
}

// statusPages returns the status pages of the rounds seen so far, as snapshots does.
func (s *scheduledChecker) statusPages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.pages...)
}

// snapshots returns the snapshots of the rounds seen so far, round 1 first.
func (s *scheduledChecker) snapshots() []*checks.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*checks.Snapshot(nil), s.seen...)
}

// hostStageBound is each stage bound of a host's check (tcpTimeout, sshTimeout, libvirtTimeout,
// rpcTimeout) in the tests of real KVM hosts: none under 2s, so that a healthy host of a loaded
// machine is not cut short.
const hostStageBound = 2 * time.Second

// pace starts a round of runner as soon as w has written the one before (its SyncedRound), up
// to round last or until ctx ends: the rounds follow one another in the order of events,
// whatever the machine's speed, and the writer writes every round's verdicts (and their Events)
// before the next round starts. published is runner.Subscribe's, taken before the runner starts.
func pace(ctx context.Context, published <-chan struct{}, runner *checks.Runner, w *crdwriter.Writer, last uint64) {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for range published {
		round := runner.Current().Round
		if round >= last {
			return
		}
		for w.Report().SyncedRound < round {
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
		runner.RunSoon()
	}
}

// TestThresholdsWithRealFaults: a kvm provider with failureThreshold 3 and successThreshold 2,
// loaded from a providers file, checked by the real runner against real KVM hosts and mirrored by
// the ProviderHealth writer into a real API server. One host meets real faults at chosen checks:
// sshd stopped for one check (it never reads down, raises no Event, and its message, status page
// note and consecutive-failures gauge say failures are pending with the raw reason); its pool
// destroyed for four checks in a row (it reads down from the third, whose time becomes its
// lastTransitionTime); the pool started again (the first success is held, it reads up from the
// second). The Events, the object's lastTransitionTime, the metrics and the history follow the
// thresholded verdict.
func TestThresholdsWithRealFaults(t *testing.T) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	fleet := kvmhost.Start(t, 2)
	flaky, steady := fleet.Hosts[0], fleet.Hosts[1]
	kc := fleet.KVMConfig()
	file := fmt.Sprintf(`providers:
  - name: hypervisors
    type: kvm
    failureThreshold: 3
    successThreshold: 2
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      tcpTimeout: %s
      sshTimeout: %s
      libvirtTimeout: %s
      rpcTimeout: %s
      hosts:
        - {address: %q, name: %s}
        - {address: %q, name: %s}
`, kc.User, kc.PrivateKeyFile, kc.KnownHostsFile, kc.Socket, kc.StoragePool, hostStageBound, hostStageBound, hostStageBound, hostStageBound,
		kc.Hosts[0].Address, kc.Hosts[0].Name, kc.Hosts[1].Address, kc.Hosts[1].Name)
	logs := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The schedule, by check: 1-2 healthy; 3 sshd stopped (one failure); 4 healthy again;
	// 5-8 pool destroyed (four failures); 9- healthy again. The exporter builds the provider's
	// real checker, and the test wraps it.
	sc := &scheduledChecker{before: map[int]func(){
		3: func() { flaky.StopSSHD(); flaky.KillSSHConnections() },
		4: flaky.StartSSHD,
		5: flaky.DestroyPool,
		9: flaky.StartPool,
	}}
	wrapConstructor(t, kvm.Type, func(c checks.Checker) checks.Checker { sc.Checker = c; return sc })

	// The round's deadline is the host's bound (every stage at hostStageBound), so that a loaded
	// machine answers within it. The rounds do not wait for the interval (longer than the test):
	// each starts as soon as the writer has written the one before (pace), so the test takes
	// as long as the checks and the writes, and the writer sees every verdict in turn.
	const timeout = 18 * time.Second // 1 tcp + 2 ssh + 2 libvirt + 4 rpc stage bounds
	const interval = 30 * time.Minute
	e := newExporter(t, file, interval, timeout, logger)
	runner := e.Runner()
	if ps := runner.Current().Providers; len(ps) != 1 || ps[0].Thresholds != (checks.Thresholds{Failure: 3, Success: 2}) {
		t.Fatalf("the runner is given %+v, want the file's thresholds", ps)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	sc.current = runner.Current
	sc.page = func() string { _, body := testutil.Fetch(t, srv.Client(), srv.URL+"/"); return body }

	w, err := crdwriter.New(crdwriter.Options{Config: env.AdminConfig, Source: runner, Logger: logger, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 12
	ctx, cancel := context.WithCancel(context.Background())
	published := runner.Subscribe(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); runner.Run(ctx) }()
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	go func() { defer wg.Done(); pace(ctx, published, runner, w, rounds+1) }()
	t.Cleanup(func() { cancel(); wg.Wait(); e.Close() })

	testutil.Eventually(t, rounds*2*timeout, fmt.Sprintf("%d rounds", rounds), func() bool { return len(sc.snapshots()) >= rounds })
	type want struct {
		up         bool
		reason     checks.Reason
		failures   int
		pending    string // in the message
		flip       bool   // Since is this check's time
		checkReady bool   // the check itself read Ready
	}
	wants := []want{
		1:  {},
		2:  {up: true, reason: checks.ReasonReady, flip: true, checkReady: true},
		3:  {up: true, reason: checks.ReasonReady, failures: 1, pending: "failures pending: 1 of 3 consecutive failed checks (failureThreshold) turn the target down; the last check: TCPUnreachable"},
		4:  {up: true, reason: checks.ReasonReady, checkReady: true},
		5:  {up: true, reason: checks.ReasonReady, failures: 1, pending: "failures pending: 1 of 3 consecutive failed checks (failureThreshold) turn the target down; the last check: PoolInactive"},
		6:  {up: true, reason: checks.ReasonReady, failures: 2, pending: "failures pending: 2 of 3"},
		7:  {up: false, reason: kvm.ReasonPoolInactive, failures: 3, flip: true},
		8:  {up: false, reason: kvm.ReasonPoolInactive, failures: 4},
		9:  {up: false, reason: kvm.ReasonPoolInactive, pending: "recovery pending: answering Ready, 1 of 2 consecutive successful checks (successThreshold) turn the target up; the last check: Ready", checkReady: true},
		10: {up: true, reason: checks.ReasonReady, flip: true, checkReady: true},
		11: {up: true, reason: checks.ReasonReady, checkReady: true},
	}
	snaps, pages := sc.snapshots(), sc.statusPages()
	target := func(s *checks.Snapshot, name string) *checks.TargetState {
		for i := range s.Providers[0].Targets {
			if ts := &s.Providers[0].Targets[i]; ts.Target == name {
				return ts
			}
		}
		t.Fatalf("round %d: no verdict on %s", s.Round, name)
		return nil
	}
	var since time.Time
	var downAt, upAt time.Time
	for n := 1; n < len(wants); n++ {
		s := snaps[n-1]
		if s.Round != uint64(n) {
			t.Fatalf("snapshot %d is of round %d", n, s.Round)
		}
		if n == 1 {
			// One success under successThreshold 2: no verdict yet (the kubelet's rule, with
			// "no verdict" as the initial value), on either host.
			if p := s.Providers[0]; len(p.Targets) != 0 || len(p.Unchecked) != 2 || p.Unchecked[0].ConsecutiveSuccesses != 1 {
				t.Errorf("round 1: verdicts %+v, unchecked %+v; want both hosts unchecked with one success", p.Targets, p.Unchecked)
			}
			continue
		}
		ts := target(s, flaky.Name)
		where := fmt.Sprintf("check %d of %s", n, flaky.Name)
		w := wants[n]
		if ts.Up != w.up || ts.Reason != w.reason || ts.ConsecutiveFailures != w.failures {
			t.Errorf("%s: up %v %s with %d failures in a row (the check: %s %q); want up %v %s with %d",
				where, ts.Up, ts.Reason, ts.ConsecutiveFailures, ts.CheckReason, ts.CheckMessage, w.up, w.reason, w.failures)
		}
		if (ts.CheckReason == checks.ReasonReady) != w.checkReady {
			t.Errorf("%s: the check itself read %s (%q), want Ready %v", where, ts.CheckReason, ts.CheckMessage, w.checkReady)
		}
		if w.pending != "" && !strings.Contains(ts.Message, w.pending) || w.pending == "" && strings.Contains(ts.Message, "pending") {
			t.Errorf("%s: message %q, want it to contain %q", where, ts.Message, w.pending)
		}
		if w.flip {
			if !ts.Since.Equal(ts.CheckedAt) {
				t.Errorf("%s: Since %s, want this check's time %s", where, ts.Since, ts.CheckedAt)
			}
			since = ts.Since
			switch n {
			case 7:
				downAt = since
			case 10:
				upAt = since
			}
		} else if !ts.Since.Equal(since) {
			t.Errorf("%s: Since moved to %s without a flip", where, ts.Since)
		}
		// The gauge says what the verdict's counts say.
		mfs, err := collector.NewGatherer(func() *checks.Snapshot { return s }).Gather()
		if err != nil {
			t.Fatal(err)
		}
		if g := gaugeOf(mfs, "proxy_operator_provider_target_consecutive_failures", flaky.Name); g != float64(w.failures) {
			t.Errorf("%s: consecutive_failures gauge %v, want %d", where, g, w.failures)
		}
		if g := gaugeOf(mfs, "proxy_operator_provider_target_up", flaky.Name); g != map[bool]float64{true: 1, false: 0}[w.up] {
			t.Errorf("%s: target_up %v, want up %v", where, g, w.up)
		}
		if st := target(s, steady.Name); !st.Up || st.ConsecutiveFailures != 0 {
			t.Errorf("round %d: the healthy host %s reads %v %s (%q)", n, steady.Name, st.Up, st.Reason, st.Message)
		}
		// The status page of the round with the single failure says it is pending.
		if n == 3 {
			// The flaky host's row (up, the note under it); the steady host has none.
			row := regexp.MustCompile(`(?s)<tr class="target"><td><a href="[^"]*">` + regexp.QuoteMeta(flaky.Name) + `</a>.*?</tr>`).FindString(pages[n-1])
			if !strings.Contains(row, `<span class="pending">failures pending (1 of 3): TCPUnreachable</span>`) {
				t.Errorf("check 3: the status page's row of %s does not note the pending failure and its raw reason:\n%s", flaky.Name, row)
			}
		}
	}
	if t.Failed() {
		t.Fatalf("logs:\n%s", logs.String())
	}

	// The history: the first verdict, down at check 7, up at check 10; no trace of check 3.
	h := target(snaps[len(wants)-2], flaky.Name).History
	var got []string
	for _, tr := range h {
		got = append(got, fmt.Sprintf("%v->%v %s", tr.FromUp, tr.Up, tr.Reason))
	}
	if strings.Join(got, ", ") != "false->true Ready, true->false PoolInactive, false->true Ready" || !h[1].At.Equal(downAt) || !h[2].At.Equal(upAt) {
		t.Errorf("history %q (at %v), want the first verdict, down at %s, up at %s", got, h, downAt, upAt)
	}
	// The transition logs: one down, one up, nothing at warn for the single failure.
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "TCPUnreachable") {
			t.Errorf("the single failure was logged as a transition: %s", l)
		}
	}
	if n := strings.Count(logs.String(), `msg="target went down"`); n != 1 {
		t.Errorf("%d \"target went down\" logs, want 1", n)
	}

	// The object and its Events follow the thresholded verdict: one Warning at check 7, one
	// Normal at check 10, and the target's lastTransitionTime is check 10's.
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	core, err := typedcorev1.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "providerhealth.io", Version: "v1alpha1", Resource: "providerhealths"}
	var events []corev1.Event
	var ltt, readyLTT string
	testutil.Eventually(t, 60*time.Second, "the object's Events for the flips and its target back up", func() bool {
		obj, err := dyn.Resource(gvr).Get(ctx, "hypervisors", metav1.GetOptions{})
		if err != nil {
			return false
		}
		ltt = targetTransition(obj, flaky.Name)
		readyLTT = readyTransition(obj)
		list, err := core.Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(obj.GetUID())).String()})
		if err != nil {
			return false
		}
		events = list.Items
		return len(events) >= 2 && ltt == upAt.UTC().Truncate(time.Second).Format(time.RFC3339)
	})
	if want := upAt.UTC().Truncate(time.Second).Format(time.RFC3339); readyLTT != want {
		t.Errorf("the Ready condition's lastTransitionTime %s, want %s (the provider's last target back at check 10)", readyLTT, want)
	}
	var summary []string
	for _, ev := range events {
		summary = append(summary, ev.Type+" "+ev.Reason+" "+ev.Message)
	}
	if len(events) != 2 || events[0].Type != corev1.EventTypeWarning || events[0].Reason != string(kvm.ReasonPoolInactive) ||
		events[1].Type != corev1.EventTypeNormal || events[1].Reason != string(checks.ReasonReady) {
		t.Errorf("Events %q, want one Warning PoolInactive (check 7) and one Normal Ready (check 10), none for the single failure", summary)
	}
	for _, s := range summary {
		if strings.Contains(s, "TCPUnreachable") {
			t.Errorf("an Event for the single failure: %s", s)
		}
	}
}

// gaugeOf returns the value of the family's series for target (-1 when absent).
func gaugeOf(mfs []*dto.MetricFamily, name, target string) float64 {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "target" && l.GetValue() == target {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// targetTransition returns the lastTransitionTime of target in a ProviderHealth object.
func targetTransition(obj *unstructured.Unstructured, target string) string {
	ts, _, _ := unstructured.NestedSlice(obj.Object, "status", "targets")
	for _, x := range ts {
		m, _ := x.(map[string]any)
		if m["name"] == target {
			s, _ := m["lastTransitionTime"].(string)
			return s
		}
	}
	return ""
}

// readyTransition returns the lastTransitionTime of a ProviderHealth object's Ready condition.
func readyTransition(obj *unstructured.Unstructured) string {
	cs, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, x := range cs {
		if m, _ := x.(map[string]any); m["type"] == "Ready" {
			s, _ := m["lastTransitionTime"].(string)
			return s
		}
	}
	return ""
}

// hungSSHTimeout is TestNotStartedHasNoVerdict's sshTimeout: three handshakes with a hung sshd
// take longer than a host's whole bound (hungSSHTimeout×2 plus the other stages at
// hostStageBound).
const hungSSHTimeout = 15 * time.Second

// TestNotStartedHasNoVerdict: a round whose deadline comes before a host's turn does not
// contact it, and a host never contacted has no verdict, on real KVM hosts. A kvm provider of
// concurrency 1 lists three hosts whose sshd hangs (each runs out its sshTimeout) before a
// healthy one: the first round reaches the deadline on the hung hosts and never starts the
// healthy one. It must be unchecked (the status page's "not checked yet"), with no target_up series, no
// count of a check, no Event and no down entry in the ProviderHealth object; the next round,
// which ranks the hung hosts last, checks it and it reads Ready.
func TestNotStartedHasNoVerdict(t *testing.T) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	fleet := kvmhost.Start(t, 4)
	hung1, hung2, hung3, healthy := fleet.Hosts[0], fleet.Hosts[1], fleet.Hosts[2], fleet.Hosts[3]
	hung1.PauseSSHD()
	hung2.PauseSSHD()
	hung3.PauseSSHD()
	t.Cleanup(func() { hung1.ResumeSSHD(); hung2.ResumeSSHD(); hung3.ResumeSSHD() })
	kc := fleet.KVMConfig()
	file := fmt.Sprintf(`providers:
  - name: starved
    type: kvm
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      concurrency: 1
      tcpTimeout: %s
      sshTimeout: %s
      libvirtTimeout: %s
      rpcTimeout: %s
      hosts:
        - {address: %q, name: %s}
        - {address: %q, name: %s}
        - {address: %q, name: %s}
        - {address: %q, name: %s}
`, kc.User, kc.PrivateKeyFile, kc.KnownHostsFile, kc.Socket, kc.StoragePool, hostStageBound, hungSSHTimeout, hostStageBound, hostStageBound,
		kc.Hosts[0].Address, kc.Hosts[0].Name, kc.Hosts[1].Address, kc.Hosts[1].Name, kc.Hosts[2].Address, kc.Hosts[2].Name,
		kc.Hosts[3].Address, kc.Hosts[3].Name)
	logs := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Every stage bound is hostStageBound but the SSH handshake's, hungSSHTimeout, long enough
	// that three hung handshakes outlast a host's bound. The round's deadline (44s, the host's
	// bound: the least the loader accepts, so that a host that runs every bound out fits a
	// round) comes during the third hung host's handshake (from 30s to 45s): the healthy host's
	// turn never comes in the first round, however slow the machine, since a hung handshake
	// only ends at its bound. (The exporter is built in process.)
	const timeout = hostStageBound + 2*hungSSHTimeout + 2*hostStageBound + kvm.CallsPerCheck*hostStageBound
	const interval = timeout + 2*time.Second
	e := newExporter(t, file, interval, timeout, logger)
	runner := e.Runner()
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	w, err := crdwriter.New(crdwriter.Options{Config: env.AdminConfig, Source: runner, Logger: logger, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { runner.Run(ctx) })
	wg.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); e.Close() })
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()

	testutil.Eventually(t, 2*interval, "the first round", func() bool { return runner.Current().Round >= 1 })
	first := runner.Current()
	_, page := testutil.Fetch(t, srv.Client(), srv.URL+"/") // the page of the first round, unless the next has ended since
	p := first.Providers[0]
	for _, ts := range p.Targets {
		if ts.Target == healthy.Name {
			t.Fatalf("round 1: the healthy host, never contacted, has a verdict: %s %q", ts.Reason, ts.Message)
		}
	}
	// The hung hosts were contacted and read down, each for the stage it hung at.
	for _, h := range []*kvmhost.Host{hung1, hung2} {
		var ts *checks.TargetState
		for i := range p.Targets {
			if p.Targets[i].Target == h.Name {
				ts = &p.Targets[i]
			}
		}
		if ts == nil || ts.Up || (ts.Reason != checks.ReasonTimeout && ts.Reason != kvm.ReasonSSHHandshakeFailed) {
			t.Fatalf("round 1: hung host %s reads %+v, want down at its SSH handshake (the round's deadline or sshTimeout)", h.Name, ts)
		}
	}
	if len(p.Unchecked) != 1 || p.Unchecked[0].Target != healthy.Name || !strings.Contains(p.Unchecked[0].Message, "not started") ||
		!p.Unchecked[0].CheckedAt.IsZero() {
		t.Fatalf("round 1: unchecked %+v, want the healthy host, not started, never contacted", p.Unchecked)
	}
	mfs, err := collector.NewGatherer(func() *checks.Snapshot { return first }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	if hasSeries(mfs, "proxy_operator_provider_target_up", healthy.Name) {
		t.Error("round 1: the never-contacted host has a target_up series")
	}
	if g := gaugeOf(mfs, "proxy_operator_provider_target_checks_total", healthy.Name); g != 0 {
		t.Errorf("round 1: the never-contacted host counts %v checks, want 0", g)
	}
	if !hasSeries(mfs, "proxy_operator_provider_target_unchecked_since_timestamp_seconds", healthy.Name) {
		t.Error("round 1: the never-contacted host has no unchecked_since series")
	}
	notes := regexp.MustCompile(`<td colspan="8" class="unchecked">([^<]*)</td>`).FindAllStringSubmatch(page, -1)
	if n := strings.Count(page, `<tbody id="provider-`); runner.Current() == first && (n != 1 || len(notes) != 1 || !strings.Contains(notes[0][1], healthy.Name)) {
		t.Errorf("round 1: the status page (%d providers) does not list %s as not checked yet: %q", n, healthy.Name, notes)
	}

	// The object of round 1 names no verdict for the healthy host.
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "providerhealth.io", Version: "v1alpha1", Resource: "providerhealths"}
	var obj *unstructured.Unstructured
	testutil.Eventually(t, 30*time.Second, "the object of the first round", func() bool {
		obj, err = dyn.Resource(gvr).Get(ctx, "starved", metav1.GetOptions{})
		return err == nil && readyTransition(obj) != ""
	})
	if runner.Current().Round == 1 {
		if ltt := targetTransition(obj, healthy.Name); ltt != "" {
			t.Errorf("round 1: the object lists the never-contacted host (since %s)", ltt)
		}
	} else {
		t.Log("round 2 ended before the object of round 1 was read: its check is left out")
	}

	// Round 2 ranks the hung hosts last: the healthy host is checked and reads Ready.
	testutil.Eventually(t, 2*interval, "the second round", func() bool { return runner.Current().Round >= 2 })
	var got *checks.TargetState
	for _, ts := range runner.Current().Providers[0].Targets {
		if ts.Target == healthy.Name {
			got = &ts
		}
	}
	if got == nil || !got.Up || got.Reason != checks.ReasonReady || got.CheckedAt.Before(first.RoundStarted.Add(interval/2)) {
		t.Fatalf("round 2: the healthy host reads %+v, want Ready from a check of round 2", got)
	}
	// No Event ever said it was down.
	core, err := typedcorev1.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the object lists the healthy host", func() bool {
		obj, err = dyn.Resource(gvr).Get(ctx, "starved", metav1.GetOptions{})
		return err == nil && targetTransition(obj, healthy.Name) != ""
	})
	list, err := core.Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(obj.GetUID())).String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if strings.Contains(ev.Message, healthy.Name) && ev.Type == corev1.EventTypeWarning {
			t.Errorf("an Event says the never-contacted host was down: %s %s", ev.Reason, ev.Message)
		}
	}
}

// hasSeries reports whether mfs holds a series of metric name for target.
func hasSeries(mfs []*dto.MetricFamily, name, target string) bool {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "target" && l.GetValue() == target {
					return true
				}
			}
		}
	}
	return false
}

// newExporter builds the exporter of the providers file text as run() does (package exporter's
// New), for a test that runs its runner itself.
func newExporter(t *testing.T, text string, interval, timeout time.Duration, logger *slog.Logger) *exporter.Exporter {
	t.Helper()
	e, err := exporter.New(fakechecks.WriteFile(t, "", text), interval, timeout, logger)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// wrapConstructor makes the checkers of the registered type typ the real ones wrapped by wrap,
// for the duration of the test.
func wrapConstructor(t *testing.T, typ checks.ProviderType, wrap func(checks.Checker) checks.Checker) {
	t.Helper()
	rt, ok := checks.Lookup(typ)
	if !ok {
		t.Fatalf("provider type %s is not registered", typ)
	}
	build := rt.New
	fakechecks.Replace(t, typ, func(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
		c, err := build(p, logger)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	})
}
