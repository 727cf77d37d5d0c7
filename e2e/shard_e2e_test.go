package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/provider-health-exporter/provider-health-exporter/test/demo"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// The timings of TestEndToEndShards: the shortest interval the flags allow (its round's
// deadline is the interval too), and short Lease timings so that a killed replica leaves soon.
const (
	shardInterval      = 10 * time.Second
	shardRoundDeadline = shardInterval // --provider-check-timeout's default: min(15s, interval)
	shardLease         = 6 * time.Second
	shardRenewDeadline = 4 * time.Second
	shardRetry         = time.Second
	// shardPoll is how often the test reads every live replica's /metrics.
	shardPoll = 500 * time.Millisecond
)

// The bounds docs/architecture.md ("Sharding") gives, with these timings.
const (
	// killedUnreported: a replica killed with SIGKILL keeps its Lease until it expires (a
	// lease duration after its last renewal, at most a retry period before the kill); the
	// others see it gone at their next read of the members (a retry period), check its targets
	// in a round they start at once (Runner.RunSoon) and publish them at that round's end (its
	// deadline at most). Two seconds for this test's polling.
	killedUnreported = shardLease + 2*shardRetry + shardRoundDeadline + 2*time.Second
	// stoppedTakeover: a replica stopped with SIGTERM deletes its Lease first and goes on
	// serving for 2 retry periods and 3s (main.go's shardLinger: 5s here); the others see it
	// gone at their next read of the members and check its targets in a round they start at
	// once, and must report them before it stops serving: its targets are never unreported.
	// (At the next scheduled round, as before, the takeover took 10-11s.)
	stoppedTakeover = 2*shardRetry + 3*time.Second
	// settled: handovers end two intervals after a change of the members (handoverIntervals),
	// the old owner lets go of its SSH links at its next round (an interval and its deadline);
	// a retry period for the members to be seen, and slack for a loaded machine.
	settled = shardRetry + 3*shardInterval + shardRoundDeadline + 10*time.Second
)

// shardView is what one replica's /metrics says.
type shardView struct {
	up      map[string]float64 // provider/target -> proxy_operator_provider_target_up
	reason  map[string]string  // provider/target -> the reason whose series is 1
	members float64
	owned   float64 // sum of proxy_operator_shard_owned_targets
	out     float64 // proxy_operator_shard_handovers_total{direction="out"}
}

var shardHTTP = &http.Client{Timeout: 10 * time.Second}

func readShardView(r *replica) (shardView, error) {
	v := shardView{up: map[string]float64{}, reason: map[string]string{}}
	resp, err := shardHTTP.Get("http://" + r.addr + "/metrics")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return v, fmt.Errorf("/metrics: %s: %s", resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return v, fmt.Errorf("/metrics: %w", err)
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	key := func(m *dto.Metric) string { return label(m, "provider") + "/" + label(m, "target") }
	for _, m := range fams["proxy_operator_provider_target_up"].GetMetric() {
		v.up[key(m)] = m.GetGauge().GetValue()
	}
	for _, m := range fams["proxy_operator_provider_target_reason"].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			v.reason[key(m)] = label(m, "reason")
		}
	}
	for _, m := range fams["proxy_operator_shard_members"].GetMetric() {
		v.members = m.GetGauge().GetValue()
	}
	for _, m := range fams["proxy_operator_shard_owned_targets"].GetMetric() {
		v.owned += m.GetGauge().GetValue()
	}
	for _, m := range fams["proxy_operator_shard_handovers_total"].GetMetric() {
		if label(m, "direction") == "out" {
			v.out = m.GetCounter().GetValue()
		}
	}
	return v, nil
}

// phVerdict is a target's entry in its provider's ProviderHealth object.
type phVerdict struct {
	up     bool
	reason string
}

// readPH reads every ProviderHealth object's targets, as provider/target.
func readPH(ctx context.Context, dyn dynamic.Interface) (map[string]phVerdict, error) {
	list, err := dyn.Resource(phResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]phVerdict{}
	for _, obj := range list.Items {
		targets, _, _ := unstructured.NestedSlice(obj.Object, "status", "targets")
		for _, x := range targets {
			m, _ := x.(map[string]any)
			name, _ := m["name"].(string)
			up, _ := m["up"].(bool)
			reason, _ := m["reason"].(string)
			out[obj.GetName()+"/"+name] = phVerdict{up: up, reason: reason}
		}
	}
	return out, nil
}

// shardWatch reads every live replica's /metrics every shardPoll and records each poll at which
// a configured target was reported by no replica, unless an excuse (a replica that left, with
// its documented bound) covers it.
type shardWatch struct {
	logf func(format string, args ...any)
	want []string // provider/target of every configured target
	// ph reads the ProviderHealth objects' targets: every configured target must be listed
	// in its provider's object at every poll, whichever replica owns it.
	ph func(context.Context) (map[string]phVerdict, error)

	mu      sync.Mutex
	live    []*replica
	gen     int // moves with live: a poll that overlapped a change is not judged
	excuses []shardExcuse
	polls   int
	gaps    []string
	// gapSince is when each target currently unreported was first seen so.
	gapSince map[string]time.Time
	// longest is the longest excused gap seen, by excuse.
	longest map[string]time.Duration
}

type shardExcuse struct {
	why     string
	targets map[string]bool
	from    time.Time
	until   time.Time
}

func (w *shardWatch) setLive(live []*replica) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live = slices.Clone(live)
	w.gen++
}

// excuse allows targets to go unreported from now until bound has passed.
func (w *shardWatch) excuse(why string, targets []string, bound time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := map[string]bool{}
	for _, k := range targets {
		ts[k] = true
	}
	now := time.Now()
	w.excuses = append(w.excuses, shardExcuse{why: why, targets: ts, from: now, until: now.Add(bound)})
}

func (w *shardWatch) run(ctx context.Context) {
	tick := time.NewTicker(shardPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mu.Lock()
		live, gen := slices.Clone(w.live), w.gen
		w.mu.Unlock()
		reported := map[string][]string{}
		var errs []string
		for _, r := range live {
			v, err := readShardView(r)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", r.name, err))
				continue
			}
			for k := range v.up {
				reported[k] = append(reported[k], r.name)
			}
		}
		objects, phErr := w.ph(ctx)
		now := time.Now()
		w.mu.Lock()
		if gen != w.gen || ctx.Err() != nil {
			w.mu.Unlock()
			continue
		}
		w.polls++
		for _, e := range errs {
			w.gaps = append(w.gaps, fmt.Sprintf("%s: a live replica did not answer: %s", now.Format("15:04:05.000"), e))
		}
		if phErr != nil {
			w.gaps = append(w.gaps, fmt.Sprintf("%s: cannot read the ProviderHealth objects: %v", now.Format("15:04:05.000"), phErr))
		}
		for _, k := range w.want {
			if _, ok := objects[k]; !ok && phErr == nil {
				w.gaps = append(w.gaps, fmt.Sprintf("%s: %s missing from its ProviderHealth object", now.Format("15:04:05.000"), k))
			}
		}
		for _, k := range w.want {
			if len(reported[k]) > 0 {
				if since, ok := w.gapSince[k]; ok {
					w.logf("%s reported again by %v, unreported since %s", k, reported[k], since.Format("15:04:05.000"))
					for _, e := range w.excuses {
						if e.targets[k] && !since.Before(e.from) {
							w.longest[e.why] = max(w.longest[e.why], now.Sub(e.from))
						}
					}
					delete(w.gapSince, k)
				}
				continue
			}
			if _, ok := w.gapSince[k]; !ok {
				w.gapSince[k] = now
				w.logf("%s reported by no replica (live: %s)", k, names(live))
			}
			excused := false
			for _, e := range w.excuses {
				if e.targets[k] && !now.Before(e.from) && now.Before(e.until) {
					excused = true
				}
			}
			if !excused {
				w.gaps = append(w.gaps, fmt.Sprintf("%s: %s reported by no replica (unreported since %s; live: %s)",
					now.Format("15:04:05.000"), k, w.gapSince[k].Format("15:04:05.000"), names(live)))
			}
		}
		w.mu.Unlock()
	}
}

func names(rs []*replica) string {
	var n []string
	for _, r := range rs {
		n = append(n, r.name)
	}
	return strings.Join(n, ",")
}

// TestEndToEndShards runs three sharded replicas of the built binary (--shard.enabled, Leases
// on a real API server) over the whole test environment with six real KVM hosts, reads every
// live replica's /metrics every half second throughout, and checks what docs/architecture.md
// ("Sharding") promises: the replicas' union is every configured target at every read, with
// no gap but the documented ones of a replica leaving; at steady state each target is
// reported by exactly one replica, every replica counts the live members, and each KVM host
// has exactly one SSH session from the exporters. Events, in order: a replica killed with
// SIGKILL (its targets taken over once its Lease expired), a replica added (it gets a share, the
// others hand over), a KVM host down (TCPUnreachable, from its one owner) and repaired, two
// replicas stopped with SIGTERM (their Leases deleted; the survivor takes over without waiting
// for an expiry, and owns everything).
func TestEndToEndShards(t *testing.T) {
	env := demo.Start(t, demo.Options{CRDFile: repoFile("deploy", "crd"), KVMHosts: 6})
	bin := binary(t)
	args := func(name string) []string {
		return []string{"--config.file=" + env.ProvidersFile, "--provider-check-interval=" + shardInterval.String(),
			"--shard.enabled", "--shard.identity=" + name, "--shard.kubeconfig=" + env.Kube.Kubeconfig,
			"--shard.lease-namespace=default", "--shard.lease-duration=" + shardLease.String(),
			"--shard.renew-deadline=" + shardRenewDeadline.String(), "--shard.retry-period=" + shardRetry.String(),
			"--crd.enabled", "--crd.leader-elect", "--crd.kubeconfig=" + env.Kube.Kubeconfig, "--crd.lease-namespace=default"}
	}
	dyn, err := dynamic.NewForConfig(env.Kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ph := func() map[string]phVerdict {
		t.Helper()
		out, err := readPH(t.Context(), dyn)
		if err != nil {
			t.Fatalf("reading the ProviderHealth objects: %v", err)
		}
		return out
	}
	// phAgrees returns how the ProviderHealth objects differ from the replicas' /metrics on
	// the targets the replicas report.
	phAgrees := func(vs map[*replica]shardView) []string {
		objects := ph()
		var problems []string
		for _, v := range vs {
			for k, up := range v.up {
				got, ok := objects[k]
				switch {
				case !ok:
					problems = append(problems, k+" missing from its ProviderHealth object")
				case got.up != (up == 1) || got.reason != v.reason[k]:
					problems = append(problems, fmt.Sprintf("%s: ProviderHealth says up=%v %s, /metrics up=%v %s", k, got.up, got.reason, up, v.reason[k]))
				}
			}
		}
		return problems
	}
	start := func(name string) *replica { return startReplica(t, name, bin, args(name)...) }
	var live []*replica
	for _, name := range []string{"shard-a", "shard-b", "shard-c"} {
		live = append(live, start(name))
	}

	views := func() map[*replica]shardView {
		t.Helper()
		out := map[*replica]shardView{}
		for _, r := range live {
			v, err := readShardView(r)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			out[r] = v
		}
		return out
	}
	// reporters returns, for each target any replica reports, the replicas that do.
	reporters := func(vs map[*replica]shardView) map[string][]string {
		out := map[string][]string{}
		for r, v := range vs {
			for k := range v.up {
				out[k] = append(out[k], r.name)
			}
		}
		for _, rs := range out {
			sort.Strings(rs)
		}
		return out
	}

	// Startup: every target reported, Ready, by the replicas together.
	var want []string
	testutil.Eventually(t, 90*time.Second, "the replicas together to report every target Ready", func() bool {
		union := map[string]bool{}
		for _, v := range views() {
			for k, up := range v.up {
				if up != 1 {
					return false
				}
				union[k] = true
			}
		}
		if len(union) != env.Targets() {
			return false
		}
		want = want[:0]
		for k := range union {
			want = append(want, k)
		}
		return true
	})
	sort.Strings(want)
	t.Logf("%d targets: %s", len(want), strings.Join(want, " "))
	// The ProviderHealth objects, written by one replica, list every target with the verdict
	// of the replica that owns it.
	testutil.Eventually(t, 60*time.Second, "the ProviderHealth objects to list every target as the replicas report it", func() bool {
		return len(phAgrees(views())) == 0 && len(ph()) == len(want)
	})

	w := &shardWatch{logf: t.Logf, want: want, ph: func(ctx context.Context) (map[string]phVerdict, error) { return readPH(ctx, dyn) },
		gapSince: map[string]time.Time{}, longest: map[string]time.Duration{}}
	w.setLive(live)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); w.run(ctx) }()
	stopWatch := func() {
		cancel()
		<-watched
	}
	defer stopWatch()

	var down map[*kvmhost.Host]bool
	// steady waits until the replicas have settled after a change: every replica counts the
	// live members, each target is reported by exactly one replica, and each KVM host (but
	// those down) has exactly one SSH session.
	steady := func(what string, since time.Time) {
		t.Helper()
		var last string
		deadline := since.Add(settled)
		for {
			var problems []string
			vs := views()
			for r, v := range vs {
				if int(v.members) != len(live) {
					problems = append(problems, fmt.Sprintf("%s sees %v members, want %d", r.name, v.members, len(live)))
				}
			}
			rep := reporters(vs)
			for _, k := range want {
				if len(rep[k]) != 1 {
					problems = append(problems, fmt.Sprintf("%s reported by %v, want exactly one replica", k, rep[k]))
				}
			}
			for _, h := range env.Fleet.Hosts {
				if n := h.TCPConnections(); !down[h] && n != 1 {
					problems = append(problems, fmt.Sprintf("%s has %d SSH sessions, want 1", h.Name, n))
				}
			}
			problems = append(problems, phAgrees(vs)...)
			writers := 0
			for _, r := range live {
				if r.leader(t) {
					writers++
				}
			}
			if writers != 1 {
				problems = append(problems, fmt.Sprintf("%d replicas write the ProviderHealth objects, want 1", writers))
			}
			if len(problems) == 0 {
				t.Logf("steady %s, %s after the change: %d members, every target reported once, one SSH session per host, the ProviderHealth objects agree",
					what, time.Since(since).Round(100*time.Millisecond), len(live))
				return
			}
			last = strings.Join(problems, "; ")
			if time.Now().After(deadline) {
				t.Fatalf("not steady %s within %s of the change: %s", what, settled, last)
			}
			time.Sleep(shardPoll)
		}
	}
	ownedBy := func(r *replica) []string {
		t.Helper()
		v, err := readShardView(r)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		var ks []string
		for k := range v.up {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	remove := func(gone ...*replica) {
		gone = slices.Clone(gone) // it may share live's array, whose tail DeleteFunc clears
		live = slices.DeleteFunc(live, func(r *replica) bool { return slices.Contains(gone, r) })
		w.setLive(live)
	}
	// takenOver waits until every one of targets is reported by a live replica, within bound
	// of since, and returns how long it took.
	takenOver := func(what string, targets []string, since time.Time, bound time.Duration) time.Duration {
		t.Helper()
		for {
			rep := reporters(views())
			var missing []string
			for _, k := range targets {
				if len(rep[k]) == 0 {
					missing = append(missing, k)
				}
			}
			took := time.Since(since)
			if len(missing) == 0 {
				t.Logf("%s: the %d targets it left reported by the others %s after", what, len(targets), took.Round(100*time.Millisecond))
				return took
			}
			if took > bound {
				t.Fatalf("%s: %v still unreported %s after, want within %s", what, missing, took.Round(100*time.Millisecond), bound)
			}
			time.Sleep(shardPoll / 2)
		}
	}
	steady("at startup", time.Now())

	// SIGKILL: the replica's Lease stays until it expires; its targets are unreported until
	// then and the others' next round.
	killed := live[1]
	lost := ownedBy(killed)
	if len(lost) == 0 {
		t.Fatalf("%s reports no target: nothing to take over", killed.name)
	}
	w.excuse("SIGKILL of "+killed.name, lost, killedUnreported)
	remove(killed)
	kill := time.Now()
	if err := killed.d.Kill(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	takenOver("SIGKILL of "+killed.name, lost, kill, killedUnreported)
	steady("after the SIGKILL of "+killed.name, kill)

	// A new replica joins: it gets a share, which the others hand over (make before break: no
	// gap is excused here).
	before := views()
	join := time.Now()
	joined := start("shard-d")
	live = append(live, joined)
	w.setLive(live)
	testutil.Eventually(t, settled, joined.name+" to report a share of the targets", func() bool {
		v, err := readShardView(joined)
		return err == nil && v.owned > 0 && len(v.up) > 0
	})
	steady("after "+joined.name+" joined", join)
	handedOver := 0.0
	for r, v := range views() {
		if r != joined {
			handedOver += v.out - before[r].out
		}
	}
	if handedOver <= 0 {
		t.Errorf("the replicas before %s counted no handover out when it joined", joined.name)
	}

	// A KVM host goes down (sshd stopped, its connections cut): exactly one replica, its
	// owner, reports it, TCPUnreachable (docs/kvm-provider.md); Ready again after the repair.
	h := env.Fleet.Hosts[0]
	hostKey := demo.KVMProvider + "/" + h.Name
	verdicts := func() map[string]string {
		out := map[string]string{}
		for r, v := range views() {
			if up, ok := v.up[hostKey]; ok {
				out[r.name] = fmt.Sprintf("up=%v reason=%s", up, v.reason[hostKey])
			}
		}
		return out
	}
	onlyOne := func(what, want string) {
		t.Helper()
		var got map[string]string
		deadline := time.Now().Add(2*shardInterval + shardRoundDeadline + 10*time.Second)
		for {
			got = verdicts()
			v := ph()[hostKey]
			inPH := fmt.Sprintf("up=%d reason=%s", map[bool]int{false: 0, true: 1}[v.up], v.reason)
			if len(got) == 1 && inPH == want {
				for _, s := range got {
					if s == want {
						t.Logf("%s: %v, and so says its ProviderHealth object", what, got)
						return
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the replicas report %s as %v, its ProviderHealth object as %+v; want %q from exactly one replica and in the object", what, h.Name, got, ph()[hostKey], want)
			}
			time.Sleep(shardPoll)
		}
	}
	down = map[*kvmhost.Host]bool{h: true}
	h.StopSSHD()
	h.KillSSHConnections()
	onlyOne("host down", "up=0 reason=TCPUnreachable")
	h.StartSSHD()
	repaired := time.Now()
	down = nil
	onlyOne("host repaired", "up=1 reason=Ready")
	steady("after "+h.Name+" was repaired", repaired)

	// SIGTERM of two replicas at once: each deletes its Lease first and goes on serving for a
	// few seconds (main.go's shardLinger: 5s here), while the survivor sees them gone at its
	// next read of the members and checks their targets in a round it starts at once. The
	// watch goes on reading the leaving replicas until the survivor reports their targets: no
	// gap is excused.
	survivor := live[len(live)-1]
	stopped := slices.Clone(live[:len(live)-1])
	var leaving []string
	for _, r := range stopped {
		leaving = append(leaving, ownedBy(r)...)
	}
	stop := time.Now()
	var wg sync.WaitGroup
	for _, r := range stopped {
		wg.Go(func() { r.d.Stop(syscall.SIGTERM, 30*time.Second) })
	}
	if len(leaving) > 0 {
		// takenOver asks the survivor only; the watch still reads the leaving replicas.
		all := live
		live = []*replica{survivor}
		takenOver("SIGTERM of "+names(stopped), leaving, stop, stoppedTakeover)
		live = all
	}
	remove(stopped...)
	wg.Wait()
	for _, r := range stopped {
		if err := r.d.WaitErr(); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit code 0", r.name, err)
		}
	}
	client, err := kubernetes.NewForConfig(env.Kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stopped {
		_, err := client.CoordinationV1().Leases("default").Get(t.Context(), r.name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s's Lease after its SIGTERM: %v, want it deleted", r.name, err)
		}
	}
	steady("with "+survivor.name+" alone", stop)
	if got := ownedBy(survivor); len(got) != len(want) {
		t.Errorf("%s alone reports %d targets, want all %d", survivor.name, len(got), len(want))
	}

	// Two more polls judged, so that the last gap's end is seen by the watch too.
	w.mu.Lock()
	polls := w.polls
	w.mu.Unlock()
	testutil.Eventually(t, 30*time.Second, "two more polls", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.polls >= polls+2
	})
	stopWatch()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("coverage: %d polls of every live replica; longest excused gaps: %v", w.polls, w.longest)
	if w.polls < 20 {
		t.Errorf("only %d polls judged: the coverage check saw too little", w.polls)
	}
	for i, g := range w.gaps {
		if i == 20 {
			t.Errorf("... and %d more", len(w.gaps)-20)
			break
		}
		t.Error("gap: " + g)
	}
}

// TestEndToEndShardHandoverCarriesCounts: a KVM host (real sshd and libvirtd) whose provider
// has failureThreshold 3 starts failing; while its owner has counted two failures (the target
// still reads up, failures pending), the owner leaves with SIGTERM. The other replica goes on
// from the two failures its part published: its first check of the host is the third failure,
// and it reports the host down at once, with the three failures, before the leaving owner
// stops serving, and so does its ProviderHealth object. Starting the count again would have
// left the host unreported for two more checks, and its outage with it.
func TestEndToEndShardHandoverCarriesCounts(t *testing.T) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	fleet := kvmhost.Start(t, 1)
	h := fleet.Hosts[0]
	// The one kvm provider of kvmProviders, with failureThreshold 3.
	providers := kvmProviders(t, fleet, map[string][]int{"lab": {0}})
	file, err := os.ReadFile(providers)
	if err != nil {
		t.Fatal(err)
	}
	withThreshold := strings.Replace(string(file), "    type: kvm\n", "    type: kvm\n    failureThreshold: 3\n", 1)
	if withThreshold == string(file) {
		t.Fatalf("no kvm provider to set failureThreshold on in:\n%s", file)
	}
	testutil.ReplaceFile(t, providers, withThreshold)
	bin := binary(t)
	var replicas []*replica
	for _, name := range []string{"carry-a", "carry-b"} {
		replicas = append(replicas, startReplica(t, name, bin, "--config.file="+providers, "--provider-check-interval="+shardInterval.String(),
			"--shard.enabled", "--shard.identity="+name, "--shard.kubeconfig="+env.Kubeconfig,
			"--shard.lease-namespace=default", "--shard.lease-duration="+shardLease.String(),
			"--shard.renew-deadline="+shardRenewDeadline.String(), "--shard.retry-period="+shardRetry.String(),
			"--crd.enabled", "--crd.leader-elect", "--crd.kubeconfig="+env.Kubeconfig, "--crd.lease-namespace=default"))
	}
	series := func(r *replica, name string) (float64, bool) {
		return testutil.Metric(t, r.metrics(t), name+`{provider="lab",target="`+h.Name+`"}`)
	}
	var owner, other *replica
	testutil.Eventually(t, 90*time.Second, "one replica to report the host up", func() bool {
		owner, other = nil, nil
		for i, r := range replicas {
			if up, ok := series(r, "proxy_operator_provider_target_up"); ok && up == 1 {
				owner, other = r, replicas[1-i]
			}
		}
		_, both := series(other, "proxy_operator_provider_target_up")
		return owner != nil && !both
	})
	t.Logf("%s owns %s", owner.name, h.Name)

	h.StopSSHD()
	h.KillSSHConnections()
	testutil.Eventually(t, 3*shardInterval+shardRoundDeadline, owner.name+" to count two failures, the host still up", func() bool {
		f, _ := series(owner, "proxy_operator_provider_target_consecutive_failures")
		up, _ := series(owner, "proxy_operator_provider_target_up")
		return f == 2 && up == 1
	})
	// Its part, published at its next renewal, carries the two failures.
	time.Sleep(2 * shardRetry)
	stop := time.Now()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		owner.d.Stop(syscall.SIGTERM, 30*time.Second)
	}()
	t.Cleanup(func() { <-stopped })
	// The host is reported at every poll: by the leaving owner while it serves, then by the
	// other replica, whose first check of it gives a verdict at once.
	for {
		_, byOther := series(other, "proxy_operator_provider_target_up")
		if byOther {
			break
		}
		if _, byOwner := series(owner, "proxy_operator_provider_target_up"); !byOwner {
			t.Fatalf("%s reported by neither replica %s after the SIGTERM of its owner %s: the new owner has no verdict yet",
				h.Name, time.Since(stop).Round(100*time.Millisecond), owner.name)
		}
		if time.Since(stop) > time.Minute {
			t.Fatalf("%s still not reported by %s a minute after the SIGTERM of %s", h.Name, other.name, owner.name)
		}
		time.Sleep(shardPoll / 2)
	}
	up, _ := series(other, "proxy_operator_provider_target_up")
	failures, _ := series(other, "proxy_operator_provider_target_consecutive_failures")
	t.Logf("%s reports %s %s after the SIGTERM: up=%v, %v consecutive failures", other.name, h.Name, time.Since(stop).Round(100*time.Millisecond), up, failures)
	if up != 0 || failures != 3 {
		t.Errorf("%s's first verdict on %s: up=%v with %v consecutive failures; want down at the third failure in a row, two of them counted by %s",
			other.name, h.Name, up, failures, owner.name)
	}
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the ProviderHealth object to show the host down", func() bool {
		objects, err := readPH(t.Context(), dyn)
		return err == nil && objects["lab/"+h.Name] == phVerdict{up: false, reason: "TCPUnreachable"}
	})
}
