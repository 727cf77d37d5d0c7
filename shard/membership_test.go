package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/shard"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// Short timing, so that an expiry happens within a test.
const (
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 250 * time.Millisecond
)

// clock is a member's clock: the real one, off by an offset the test may move.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

type member struct {
	m     *shard.Membership
	clock *clock
	stop  context.CancelFunc
	done  chan struct{}
	// pub is what the member publishes; working what Working answers.
	mu      sync.Mutex
	pub     shard.Publication
	working error
}

func (mb *member) setPub(p shard.Publication) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	mb.pub = p
}

func (mb *member) setWorking(err error) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	mb.working = err
}

type memberOpts struct {
	offset                                    time.Duration
	leaseDuration, renewDeadline, retryPeriod time.Duration
	// follow is the member's MembershipOptions.Follow (nil: it follows the parts always).
	follow func() bool
}

func start(t *testing.T, cfg *rest.Config, instance, identity string, o ...memberOpts) *member {
	t.Helper()
	opts := memberOpts{leaseDuration: leaseDuration, renewDeadline: renewDeadline, retryPeriod: retryPeriod}
	if len(o) > 0 {
		opts = o[0]
	}
	mb := &member{clock: &clock{off: opts.offset}, done: make(chan struct{})}
	mb.pub = shard.Publication{Data: []byte("part of " + identity), Verdicts: 1, CheckedAt: time.Now(), Key: "k1"}
	m, err := shard.NewMembership(shard.MembershipOptions{
		Config: cfg, Namespace: "default", Identity: identity, Instance: instance,
		LeaseDuration: opts.leaseDuration, RenewDeadline: opts.renewDeadline, RetryPeriod: opts.retryPeriod,
		Now:    mb.clock.now,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Part: func() shard.Publication {
			mb.mu.Lock()
			defer mb.mu.Unlock()
			return mb.pub
		},
		OnParts: func([]shard.Part) {},
		Follow:  opts.follow,
		Working: func() error {
			mb.mu.Lock()
			defer mb.mu.Unlock()
			return mb.working
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mb.m = m
	ctx, cancel := context.WithCancel(context.Background())
	mb.stop = cancel
	go func() {
		defer close(mb.done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-mb.done
	})
	return mb
}

// tWriter writes a member's log lines into the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitMembers(t *testing.T, m *shard.Membership, want ...string) {
	t.Helper()
	itestutil.Eventually(t, 30*time.Second, fmt.Sprintf("%s to see the members %v", m.Identity(), want), func() bool {
		return slices.Equal(m.Members(), want)
	})
}

func partOf(parts []shard.Part, identity string) *shard.Part {
	for i := range parts {
		if parts[i].Identity == identity {
			return &parts[i]
		}
	}
	return nil
}

func startKube(t *testing.T) (*kube.Env, *kubernetes.Clientset) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, filepath.Join("..", "deploy", "crd", "providerhealth.io_providerhealthparts.yaml"))
	return env, kubernetes.NewForConfigOrDie(env.AdminConfig)
}

// A replica that never reached the API server has not joined: it sees no member, not even
// itself, so that it owns nothing rather than everything.
func TestReplicaWithoutAPIServerOwnsNothing(t *testing.T) {
	m, err := shard.NewMembership(shard.MembershipOptions{Config: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "default", Identity: "phe-0", Instance: "main",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Join(context.Background()); err == nil || len(m.Members()) != 0 || m.Joined() {
		t.Errorf("Join without an API server: %v, members %v, joined %v; want an error, none, not joined", err, m.Members(), m.Joined())
	}
	mb := start(t, &rest.Config{Host: "http://127.0.0.1:1"}, "main", "phe-0")
	itestutil.Eventually(t, 30*time.Second, "a failed step", func() bool { return mb.m.FailedSteps() >= 2 })
	if got := mb.m.Members(); len(got) != 0 || mb.m.Joined() {
		t.Errorf("members without an API server: %v (joined %v), want none", got, mb.m.Joined())
	}
}

func TestNewRejectsBadTiming(t *testing.T) {
	_, err := shard.NewMembership(shard.MembershipOptions{Config: &rest.Config{Host: "http://x"}, Namespace: "default", Identity: "a", Instance: "main",
		LeaseDuration: 2 * time.Second, RetryPeriod: 2 * time.Second})
	if err == nil {
		t.Error("a retry period as long as the lease duration was accepted")
	}
	if _, err := shard.NewMembership(shard.MembershipOptions{Config: &rest.Config{Host: "http://x"}, Namespace: "default", Instance: "main"}); err == nil {
		t.Error("an empty identity was accepted")
	}
}

// On a real API server: the members are the Leases of the instance seen renewed; a member
// killed without releasing leaves a lease duration after its last renewal was seen; one that
// releases leaves at once, its part kept; a Lease never seen live (a forgery, with a renewal
// time in the year 3000) never counts, nor does its part; while the API server is down, the
// members last seen are kept.
func TestMembersFromLeases(t *testing.T) {
	env, admin := startKube(t)
	leases := admin.CoordinationV1().Leases("default")

	a := start(t, env.AdminConfig, "main", "phe-a")
	b := start(t, env.AdminConfig, "main", "phe-b")
	// Another deployment in the same namespace: never a member of "main".
	start(t, env.AdminConfig, "other", "phe-other")
	waitMembers(t, a.m, "phe-a", "phe-b")
	waitMembers(t, b.m, "phe-a", "phe-b")

	// A member killed with SIGKILL: its Lease, renewed once, is never renewed again.
	labels := map[string]string{shard.InstanceLabel: "main", shard.ShardLabel: "member"}
	now := metav1.NewMicroTime(time.Now())
	holder, dur := "phe-killed", int32(leaseDuration/time.Second)
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "phe-killed", Labels: labels},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, a.m, "phe-a", "phe-b", "phe-killed")
	waitMembers(t, a.m, "phe-a", "phe-b")

	// A forged Lease: no holder, renewed "in the year 3000", with a part. Never a member, and
	// its part is not among the parts.
	future := metav1.NewMicroTime(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	empty := ""
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "phe-forged", Labels: labels},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &empty, LeaseDurationSeconds: &dur, RenewTime: &future},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	forger := start(t, env.AdminConfig, "main", "phe-forged")
	itestutil.Eventually(t, 10*time.Second, "phe-a to read phe-b's part", func() bool {
		p := partOf(a.m.Parts(), "phe-b")
		return p != nil && p.Live && string(p.Data) == "part of phe-b" && p.RoundAt.Equal(b.pub.CheckedAt.Truncate(time.Millisecond))
	})
	forger.stop()
	<-forger.done
	_ = forger.m.Release(context.Background())
	// The forger's Lease is rewritten with no holder and a renewal in the future: not live.
	l, err := leases.Get(context.Background(), "phe-forged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.RenewTime = &empty, &future
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := start(t, env.AdminConfig, "main", "phe-c")
	waitMembers(t, c.m, "phe-a", "phe-b", "phe-c")
	time.Sleep(2 * leaseDuration)
	if got := c.m.Members(); !slices.Equal(got, []string{"phe-a", "phe-b", "phe-c"}) {
		t.Errorf("members with a forged Lease: %v", got)
	}
	if p := partOf(c.m.Parts(), "phe-forged"); p != nil && (p.Live || !p.LastLive.IsZero()) {
		t.Errorf("the forged Lease's part counts: %+v", p)
	}
	c.stop()
	<-c.done
	_ = c.m.Release(context.Background())
	c.m.Delete(context.Background())

	// b stops and releases: its Lease has no holder (a sees it leave at once) and its part
	// stays readable for the handover; Delete deletes both.
	b.stop()
	<-b.done
	if err := b.m.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err = leases.Get(context.Background(), "phe-b", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil {
		t.Errorf("phe-b's Lease after its release: %v, err %v; want no holder", l, err)
	}
	waitMembers(t, a.m, "phe-a")
	if p := partOf(a.m.Parts(), "phe-b"); p == nil || p.Live || p.LastLive.IsZero() || string(p.Data) != "part of phe-b" {
		t.Errorf("phe-b's part after its release: %+v; want it kept, not live, seen live before", p)
	}
	b.m.Delete(context.Background())
	if _, err := leases.Get(context.Background(), "phe-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("phe-b's Lease after Delete: err %v, want NotFound", err)
	}

	// A replica that joins sees the members before its first round (Join), not itself alone.
	joiner, err := shard.NewMembership(shard.MembershipOptions{
		Config: env.AdminConfig, Namespace: "default", Identity: "phe-b", Instance: "main",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := joiner.Join(context.Background()); err != nil {
		t.Fatalf("Join: %v", err)
	}
	// A Lease it sees for the first time counts as renewed then: the killed member's, still
	// held, is a member for this newcomer until a lease duration passes without a change.
	if got := joiner.Members(); !slices.Contains(got, "phe-a") || !slices.Contains(got, "phe-b") || slices.Contains(got, "phe-forged") {
		t.Errorf("after Join: %v, want phe-a and phe-b among them, never the forged Lease", got)
	}
	b2 := start(t, env.AdminConfig, "main", "phe-b")
	waitMembers(t, a.m, "phe-a", "phe-b")
	waitMembers(t, b2.m, "phe-a", "phe-b")

	// Leases seen unchanged for GCAfter on a member's own clock are deleted by it; live ones
	// are not, however far its clock moves.
	a.clock.add(shard.GCAfter + time.Minute)
	itestutil.Eventually(t, 10*time.Second, "the Leases left unrenewed to be deleted", func() bool {
		_, err1 := leases.Get(context.Background(), "phe-killed", metav1.GetOptions{})
		_, err2 := leases.Get(context.Background(), "phe-forged", metav1.GetOptions{})
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2)
	})
	for _, name := range []string{"phe-a", "phe-b"} {
		if _, err := leases.Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s's Lease after a member's clock jumped: %v, want it kept", name, err)
		}
	}

	// The API server goes away for longer than a Lease lives: the members stay.
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	steps := int(2*leaseDuration/retryPeriod) + 1
	itestutil.Eventually(t, time.Minute, "steps failing for two lease durations", func() bool { return a.m.FailedSteps() >= steps })
	if got := a.m.Members(); !slices.Equal(got, []string{"phe-a", "phe-b"}) {
		t.Errorf("members after an outage longer than the lease: %v, want [phe-a phe-b] (kept)", got)
	}
	if err := env.Restart(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, a.m, "phe-a", "phe-b")
	itestutil.Eventually(t, 30*time.Second, "the steps to succeed again", func() bool { return a.m.FailedSteps() == 0 })
}

// A member's part is written when its key changes, not at every step: unchanged, or changed
// in its messages alone, it is written again only after PartRefresh. The Lease names the part
// each round confirmed, and carries nothing else.
func TestPartWrittenOnlyWhenItChanges(t *testing.T) {
	env, admin := startKube(t)
	a := start(t, env.AdminConfig, "main", "phe-a")
	b := start(t, env.AdminConfig, "main", "phe-b")
	waitMembers(t, a.m, "phe-a", "phe-b")
	writes := func() float64 { return partWrites(t, a.m) }
	itestutil.Eventually(t, 10*time.Second, "a first write", func() bool { return writes() == 1 })
	time.Sleep(20 * retryPeriod)
	if got := writes(); got != 1 {
		t.Errorf("%v writes of an unchanged part over 20 steps, want 1", got)
	}
	// New messages, same verdicts (key): not written before PartRefresh.
	checked := time.Now()
	a.setPub(shard.Publication{Data: []byte("part of phe-a, new messages"), Verdicts: 1, CheckedAt: checked, Key: "k1"})
	time.Sleep(8 * retryPeriod)
	if got := writes(); got != 1 {
		t.Errorf("%v writes after a change of messages alone, want 1", got)
	}
	// b reads the round a's Lease confirms, with the part it has.
	itestutil.Eventually(t, 10*time.Second, "phe-b to see phe-a's new round", func() bool {
		p := partOf(b.m.Parts(), "phe-a")
		return p != nil && string(p.Data) == "part of phe-a" && p.RoundAt.Equal(checked.Truncate(time.Millisecond))
	})
	a.clock.add(shard.PartRefresh)
	itestutil.Eventually(t, 10*time.Second, "the messages written after PartRefresh", func() bool { return writes() == 2 })
	// A new key is written at the next step.
	a.setPub(shard.Publication{Data: []byte("part of phe-a, a flip"), Verdicts: 1, CheckedAt: time.Now(), Key: "k2"})
	itestutil.Eventually(t, 10*time.Second, "a changed key written", func() bool { return writes() == 3 })
	itestutil.Eventually(t, 10*time.Second, "phe-b to read the new part", func() bool {
		p := partOf(b.m.Parts(), "phe-a")
		return p != nil && string(p.Data) == "part of phe-a, a flip"
	})
	l, err := admin.CoordinationV1().Leases("default").Get(context.Background(), "phe-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range l.Annotations {
		if k != shard.RoundAnnotation || len(v) > 41 {
			t.Errorf("phe-a's Lease carries %s=%q; want the round annotation alone, short", k, v)
		}
	}
}

// partWrites is m's proxy_operator_shard_part_writes_total.
func partWrites(t *testing.T, m *shard.Membership) float64 {
	t.Helper()
	for _, c := range m.Collectors() {
		if testutil.CollectAndCount(c, "proxy_operator_shard_part_writes_total") == 1 {
			return testutil.ToFloat64(c)
		}
	}
	t.Fatal("no proxy_operator_shard_part_writes_total")
	return 0
}

// A member that does not follow the parts (MembershipOptions.Follow: not the ProviderHealth
// writer, handing nothing over) reads none of the others' as they change: it drops one that
// changed since it read it. Refresh reads them when it needs them; once it follows, it reads
// each change as it comes. Its reads are counted at its client.
func TestPartsReadOnlyWhenFollowed(t *testing.T) {
	env, _ := startKube(t)
	var reads atomic.Int64
	counted := rest.CopyConfig(env.AdminConfig)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/providerhealthparts/phe-a") {
				reads.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	var follow atomic.Bool
	a := start(t, env.AdminConfig, "main", "phe-a")
	opts := memberOpts{leaseDuration: leaseDuration, renewDeadline: renewDeadline, retryPeriod: retryPeriod, follow: follow.Load}
	b := start(t, counted, "main", "phe-b", opts)
	waitMembers(t, b.m, "phe-a", "phe-b")
	publish := func(data string) {
		t.Helper()
		before := partWrites(t, a.m)
		a.setPub(shard.Publication{Data: []byte(data), Verdicts: 1, CheckedAt: time.Now(), Key: data})
		itestutil.Eventually(t, 10*time.Second, "phe-a to write "+data, func() bool { return partWrites(t, a.m) > before })
	}
	for _, data := range []string{"flip 1", "flip 2", "flip 3"} {
		publish(data)
	}
	// The watch has seen the last write when the list of the parts (b's Refresh, below) would:
	// give it the time of a few steps.
	time.Sleep(4 * retryPeriod)
	if n := reads.Load(); n != 0 {
		t.Errorf("phe-b, not following, read phe-a's part %d times, want 0", n)
	}
	if p := partOf(b.m.Parts(), "phe-a"); p != nil {
		t.Errorf("phe-b, not following, holds phe-a's part %q", p.Data)
	}
	if err := b.m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := partOf(b.m.Parts(), "phe-a"); p == nil || string(p.Data) != "flip 3" || reads.Load() != 1 {
		t.Errorf("after Refresh phe-b holds %v after %d reads, want phe-a's last part (flip 3) after 1", p, reads.Load())
	}
	// Nothing changed: a second Refresh reads nothing.
	if err := b.m.Refresh(context.Background()); err != nil || reads.Load() != 1 {
		t.Errorf("a Refresh with nothing changed: %v, %d reads in all, want 1", err, reads.Load())
	}
	follow.Store(true)
	publish("flip 4")
	itestutil.Eventually(t, 10*time.Second, "phe-b, following, to read phe-a's change", func() bool {
		p := partOf(b.m.Parts(), "phe-a")
		return p != nil && string(p.Data) == "flip 4"
	})
}

// roundTripper is a function that is an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A member whose rounds are wedged releases its Lease (the others stop counting it, it counts
// itself out too) and says so in a metric; once they work again it takes its Lease back.
func TestWedgedMemberReleasesItsLease(t *testing.T) {
	env, _ := startKube(t)
	a := start(t, env.AdminConfig, "main", "phe-a")
	b := start(t, env.AdminConfig, "main", "phe-b")
	waitMembers(t, a.m, "phe-a", "phe-b")
	b.setWorking(fmt.Errorf("no round of checks has started for 2m31s"))
	waitMembers(t, a.m, "phe-a")
	waitMembers(t, b.m, "phe-a")
	var wedged float64
	for _, c := range b.m.Collectors() {
		if testutil.CollectAndCount(c, "proxy_operator_shard_wedged") == 1 {
			wedged = testutil.ToFloat64(c)
		}
	}
	if wedged != 1 {
		t.Errorf("proxy_operator_shard_wedged %v while wedged, want 1", wedged)
	}
	b.setWorking(nil)
	waitMembers(t, a.m, "phe-a", "phe-b")
	waitMembers(t, b.m, "phe-a", "phe-b")
}

// Members judge each other by the renewals they see on their own clocks, so clocks that
// disagree by minutes change nothing: members 20 s ahead, 6 min ahead and 60 s behind see the
// same members throughout, and no live Lease is deleted.
func TestClockSkewChangesNothing(t *testing.T) {
	env, admin := startKube(t)
	offsets := map[string]time.Duration{"phe-a": 0, "phe-b": 20 * time.Second, "phe-c": 6 * time.Minute, "phe-d": -time.Minute}
	var all []string
	ms := map[string]*member{}
	for name, off := range offsets {
		ms[name] = start(t, env.AdminConfig, "main", name, memberOpts{offset: off, leaseDuration: leaseDuration, renewDeadline: renewDeadline, retryPeriod: retryPeriod})
		all = append(all, name)
	}
	slices.Sort(all)
	for _, mb := range ms {
		waitMembers(t, mb.m, all...)
	}
	changes := func(mb *member) float64 {
		for _, c := range mb.m.Collectors() {
			if testutil.CollectAndCount(c, "proxy_operator_shard_membership_changes_total") == 1 {
				return testutil.ToFloat64(c)
			}
		}
		return -1
	}
	before := map[string]float64{}
	uids := map[string]types.UID{}
	for name, mb := range ms {
		before[name] = changes(mb)
		l, err := admin.CoordinationV1().Leases("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = l.UID
	}
	// Ten lease durations, thousands of reads between them.
	deadline := time.Now().Add(10 * leaseDuration)
	for time.Now().Before(deadline) {
		for name, mb := range ms {
			if got := mb.m.Members(); !slices.Equal(got, all) {
				t.Fatalf("%s (clock off by %s) sees %v, want %v", name, offsets[name], got, all)
			}
		}
		time.Sleep(retryPeriod / 2)
	}
	for name, mb := range ms {
		if got := changes(mb); got != before[name] {
			t.Errorf("%s (clock off by %s): %v membership changes, want none", name, offsets[name], got-before[name])
		}
		l, err := admin.CoordinationV1().Leases("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || l.UID != uids[name] {
			t.Errorf("%s's Lease was deleted: %v", name, err)
		}
	}
}

// A slow API server (6 s of latency on every answer, within the default renew deadline of
// 10 s) makes no member flap: with the default timing, members behind the slow link are seen
// renewing within the lease duration throughout.
func TestSlowAPIServerChangesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of real time")
	}
	env, _ := startKube(t)
	slow := rest.CopyConfig(env.AdminConfig)
	slow.Host = "https://" + itestutil.NewRelay(t, env.URL[len("https://"):], 6*time.Second).Addr()
	def := memberOpts{leaseDuration: shard.DefaultLeaseDuration, renewDeadline: shard.DefaultRenewDeadline, retryPeriod: shard.DefaultRetryPeriod}
	a := start(t, env.AdminConfig, "main", "phe-a", def)
	b := start(t, slow, "main", "phe-b", def)
	c := start(t, slow, "main", "phe-c", def)
	all := []string{"phe-a", "phe-b", "phe-c"}
	for _, mb := range []*member{a, b, c} {
		itestutil.Eventually(t, 2*time.Minute, mb.m.Identity()+" to see every member", func() bool { return slices.Equal(mb.m.Members(), all) })
	}
	deadline := time.Now().Add(4 * shard.DefaultLeaseDuration)
	for time.Now().Before(deadline) {
		for _, mb := range []*member{a, b, c} {
			if got := mb.m.Members(); !slices.Equal(got, all) {
				t.Fatalf("%s sees %v, want %v", mb.m.Identity(), got, all)
			}
		}
		time.Sleep(time.Second)
	}
}

// Two members leave one after the other (a drain's evictions) and the observer's read falls
// between the two releases: it reads the members again well within a retry period, not a
// whole one later, so that the second leaver's share (and what the first one's read handed
// it) is taken while the first one still lingers. The retry period is long, so that a read
// a quarter of it away (departureReads) and one a whole period away are seconds apart.
func TestSecondDepartureSeenSoon(t *testing.T) {
	env, _ := startKube(t)
	slow := memberOpts{leaseDuration: 40 * time.Second, renewDeadline: 2 * time.Second, retryPeriod: 8 * time.Second}
	x := start(t, env.AdminConfig, "main", "phe-x", slow)
	a := start(t, env.AdminConfig, "main", "phe-a", slow)
	b := start(t, env.AdminConfig, "main", "phe-b", slow)
	waitMembers(t, x.m, "phe-a", "phe-b", "phe-x")
	leave := func(mb *member) {
		mb.stop()
		<-mb.done
		if err := mb.m.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	leave(a)
	waitMembers(t, x.m, "phe-b", "phe-x")
	// x has just read the members; its next read would be a retry period (8 s) away.
	leave(b)
	released := time.Now()
	waitMembers(t, x.m, "phe-x")
	if took := time.Since(released); took >= slow.retryPeriod*3/4 {
		t.Errorf("the second departure was seen %s after it, a retry period (%s) later: want the next read within a quarter of one, and the step's own time", took.Round(time.Millisecond), slow.retryPeriod)
	}
}
