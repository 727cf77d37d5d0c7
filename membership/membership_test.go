package membership_test

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
	"github.com/provider-health-exporter/provider-health-exporter/membership"
)

// Short timing, so that an expiry happens within a test.
const (
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 250 * time.Millisecond
)

type member struct {
	m    *membership.Membership
	stop context.CancelFunc
	done chan struct{}
}

func start(t *testing.T, cfg *rest.Config, instance, identity string) *member {
	t.Helper()
	m, err := membership.New(membership.Options{
		Config: cfg, Namespace: "default", Identity: identity, Instance: instance,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Part: func() string { return "part of " + identity },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mb := &member{m: m, stop: cancel, done: make(chan struct{})}
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

func waitMembers(t *testing.T, m *membership.Membership, want ...string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, m.Identity()+" to see the members "+joinNames(want), func() bool {
		return slices.Equal(m.Members(), want)
	})
}

func joinNames(s []string) string {
	out := ""
	for i, n := range s {
		if i > 0 {
			out += ","
		}
		out += n
	}
	return out
}

// A replica that never reached the API server sees itself alone: it owns everything.
func TestLoneReplicaWithoutAPIServer(t *testing.T) {
	m, err := membership.New(membership.Options{Config: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "default", Identity: "phe-0", Instance: "main",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Join(context.Background()); err == nil || !slices.Equal(m.Members(), []string{"phe-0"}) {
		t.Errorf("Join without an API server: %v, members %v; want an error and [phe-0]", err, m.Members())
	}
	mb := start(t, &rest.Config{Host: "http://127.0.0.1:1"}, "main", "phe-0")
	testutil.Eventually(t, 30*time.Second, "a failed step", func() bool { return mb.m.FailedSteps() >= 2 })
	if got := mb.m.Members(); !slices.Equal(got, []string{"phe-0"}) {
		t.Errorf("members without an API server: %v, want [phe-0]", got)
	}
}

func TestNewRejectsBadTiming(t *testing.T) {
	_, err := membership.New(membership.Options{Config: &rest.Config{Host: "http://x"}, Namespace: "default", Identity: "a", Instance: "main",
		LeaseDuration: 2 * time.Second, RetryPeriod: 2 * time.Second})
	if err == nil {
		t.Error("a retry period as long as the lease duration was accepted")
	}
	if _, err := membership.New(membership.Options{Config: &rest.Config{Host: "http://x"}, Namespace: "default", Instance: "main"}); err == nil {
		t.Error("an empty identity was accepted")
	}
}

// On a real API server: the members are the live Leases of the instance; a member killed
// without releasing leaves when its Lease expires; one that stops releases its Lease; while
// the API server is down, the members last seen are kept.
func TestMembersFromLeases(t *testing.T) {
	env := kube.Start(t)
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)
	leases := admin.CoordinationV1().Leases("default")

	a := start(t, env.AdminConfig, "main", "phe-a")
	b := start(t, env.AdminConfig, "main", "phe-b")
	// Another deployment in the same namespace: never a member of "main".
	start(t, env.AdminConfig, "other", "phe-other")
	waitMembers(t, a.m, "phe-a", "phe-b")
	waitMembers(t, b.m, "phe-a", "phe-b")

	// A member killed with SIGKILL: its Lease, renewed once, is never renewed again.
	now := metav1.NewMicroTime(time.Now())
	holder, dur := "phe-killed", int32(leaseDuration/time.Second)
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "phe-killed", Labels: map[string]string{membership.InstanceLabel: "main", membership.ShardLabel: "member"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, a.m, "phe-a", "phe-b", "phe-killed")
	waitMembers(t, a.m, "phe-a", "phe-b")
	l, err := leases.Get(context.Background(), "phe-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "phe-a" || !membership.Live(l, time.Now()) {
		t.Errorf("phe-a's Lease is not held and live: %+v", l.Spec)
	}

	// Each member reads the others' parts with the members.
	testutil.Eventually(t, 10*time.Second, "phe-a to read phe-b's part", func() bool {
		return slices.Contains(a.m.Parts(), membership.Part{Identity: "phe-b", Live: true, Value: "part of phe-b"})
	})

	// b stops: once Run returned its Lease has no holder (a sees it leave) and keeps its part
	// for the handover; Delete deletes it.
	b.stop()
	<-b.done
	l, err = leases.Get(context.Background(), "phe-b", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil || l.Annotations[membership.PartAnnotation] != "part of phe-b" {
		t.Errorf("phe-b's Lease after its stop: %v, err %v; want no holder and its part kept", l, err)
	}
	waitMembers(t, a.m, "phe-a")
	testutil.Eventually(t, 10*time.Second, "phe-a to keep reading phe-b's part, not live", func() bool {
		return slices.Contains(a.m.Parts(), membership.Part{Identity: "phe-b", Live: false, Value: "part of phe-b"})
	})
	b.m.Delete(context.Background())
	if _, err := leases.Get(context.Background(), "phe-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("phe-b's Lease after Delete: err %v, want NotFound", err)
	}

	// A Lease left expired for longer than GCAfter (a killed pod's) is deleted by a member; one
	// expired more recently is kept, its part readable.
	for name, age := range map[string]time.Duration{"phe-long-dead": membership.GCAfter + time.Minute, "phe-just-dead": time.Minute} {
		renewed := metav1.NewMicroTime(time.Now().Add(-age))
		if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{membership.InstanceLabel: "main", membership.ShardLabel: "member"},
				Annotations: map[string]string{membership.PartAnnotation: "part of " + name}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renewed},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the Lease expired longer than GCAfter to be deleted", func() bool {
		_, err := leases.Get(context.Background(), "phe-long-dead", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := leases.Get(context.Background(), "phe-just-dead", metav1.GetOptions{}); err != nil {
		t.Errorf("a Lease expired a minute ago: %v, want it kept", err)
	}
	if !slices.Contains(a.m.Parts(), membership.Part{Identity: "phe-just-dead", Value: "part of phe-just-dead"}) {
		t.Errorf("parts %v: want phe-just-dead's, not live", a.m.Parts())
	}
	if err := leases.Delete(context.Background(), "phe-just-dead", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A replica that joins sees the members before its first round (Join), not itself alone.
	joiner, err := membership.New(membership.Options{
		Config: env.AdminConfig, Namespace: "default", Identity: "phe-b", Instance: "main",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := joiner.Members(); !slices.Equal(got, []string{"phe-b"}) {
		t.Errorf("before Join: %v, want [phe-b]", got)
	}
	if err := joiner.Join(context.Background()); err != nil {
		t.Fatalf("Join: %v", err)
	}
	if got := joiner.Members(); !slices.Equal(got, []string{"phe-a", "phe-b"}) {
		t.Errorf("after Join: %v, want [phe-a phe-b]", got)
	}
	if _, err := leases.Get(context.Background(), "phe-b", metav1.GetOptions{}); err != nil {
		t.Errorf("phe-b's Lease after Join: %v, want it created", err)
	}
	b2 := start(t, env.AdminConfig, "main", "phe-b")
	waitMembers(t, a.m, "phe-a", "phe-b")
	waitMembers(t, b2.m, "phe-a", "phe-b")

	// The API server goes away for longer than a Lease lives: the members stay.
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	steps := int(2*leaseDuration/retryPeriod) + 1
	testutil.Eventually(t, time.Minute, "steps failing for two lease durations", func() bool { return a.m.FailedSteps() >= steps })
	if got := a.m.Members(); !slices.Equal(got, []string{"phe-a", "phe-b"}) {
		t.Errorf("members after an outage longer than the lease: %v, want [phe-a phe-b] (kept)", got)
	}
	if err := env.Restart(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, a.m, "phe-a", "phe-b")
	testutil.Eventually(t, 30*time.Second, "the steps to succeed again", func() bool { return a.m.FailedSteps() == 0 })
}
