package kvm

import (
	"context"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// CheckTargets (a sharded replica's check of the hosts it owns) checks the named hosts only,
// one verdict each, in the checker's order; a name the checker does not have is ignored.
func TestCheckTargets(t *testing.T) {
	p := config.Provider{Name: "lab", Type: "kvm", Block: &Config{
		User: "root", PrivateKeyFile: "/nonexistent", KnownHostsFile: "/nonexistent", StoragePool: "default",
		Hosts: []Host{{Address: "198.18.0.2", Name: "hv1"}, {Address: "198.18.0.3", Name: "hv2"}, {Address: "198.18.0.4", Name: "hv3"}},
	}}
	c := newChecker(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rs := c.CheckTargets(ctx, []string{"hv3", "hv1", "elsewhere"})
	if len(rs) != 2 || rs[0].Target != "hv1" || rs[1].Target != "hv3" {
		t.Fatalf("CheckTargets(hv3, hv1) = %+v, want verdicts on hv1 and hv3 only", rs)
	}
	for _, r := range rs {
		// No host is contacted: the unreadable key fails first, as a verdict.
		if r.Reason != ReasonKeyMaterialError {
			t.Errorf("%s: %s %q, want KeyMaterialError", r.Target, r.Reason, r.Message)
		}
	}
	if rs := c.CheckTargets(ctx, nil); len(rs) != 0 {
		t.Errorf("CheckTargets(none) = %+v, want no verdict", rs)
	}
}

// A sharded replica keeps SSH links only to the hosts it owns: after CheckTargets the links of
// the checker's other hosts are closed (their new owner has its own), the owned hosts keep
// theirs, a /probe of a host not owned dials it and its link lasts while /probe uses it (closed
// at the end of a round with no /probe of the host since the round before), and a link in use
// (an abandoned probe's call still out) is never cut under its call.
func TestCheckTargetsReleasesOtherLinks(t *testing.T) {
	f := kvmhost.Start(t, 3)
	c := newChecker(t, provider("kvm-shard", f, f.Hosts))
	owned, other, busy := f.Hosts[0], f.Hosts[1], f.Hosts[2]
	for _, h := range f.Hosts {
		h.CountSSHConnections()
	}
	for name, r := range round(t, c) {
		if r.Reason != checks.ReasonReady {
			t.Fatalf("%s: %s (%q), want Ready", name, r.Reason, r.Message)
		}
	}
	subset := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
		defer cancel()
		rs := c.CheckTargets(ctx, []string{owned.Name})
		if len(rs) != 1 || rs[0].Reason != checks.ReasonReady {
			t.Fatalf("CheckTargets(%s) = %+v, want it Ready", owned.Name, rs)
		}
		c.waitRelease()
	}
	closed := func(h *kvmhost.Host, why string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, h.Name+" to see no SSH connection "+why, func() bool { return h.TCPConnections() == 0 })
	}
	open := func(h *kvmhost.Host, why string) {
		t.Helper()
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%s: %d SSH connections %s, want 1", h.Name, n, why)
		}
	}

	subset()
	closed(other, "after a round over the owned host")
	closed(busy, "after a round over the owned host")
	open(owned, "after a round over it")

	probe := func(h *kvmhost.Host, timeout time.Duration) checks.TargetResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		r, err := c.ProbeTarget(ctx, h.Name, nil)
		if err != nil {
			t.Fatalf("probe %s: %v", h.Name, err)
		}
		return r
	}
	if r := probe(other, roundTimeout); r.Reason != checks.ReasonReady {
		t.Fatalf("probe of a host not owned: %s (%q), want Ready", r.Reason, r.Message)
	}
	open(other, "after a /probe of it")
	subset()
	time.Sleep(200 * time.Millisecond) // a close would have reached the host by now
	open(other, "at the end of the round after its /probe")
	if r := probe(other, roundTimeout); r.Reason != checks.ReasonReady {
		t.Fatalf("second probe of a host not owned: %s (%q), want Ready", r.Reason, r.Message)
	}
	subset()
	time.Sleep(200 * time.Millisecond)
	open(other, "at the end of a round after another /probe of it")
	subset()
	closed(other, "at the end of a round with no /probe of it since the round before")
	if n := other.SSHConnectionsSeen(); n != 2 {
		t.Errorf("%s: %d SSH connections reached it, want 2 (the rounds', then the /probes' one link)", other.Name, n)
	}

	// busy's libvirtd stalls under a probe, which is abandoned at its deadline while its call
	// is still out: the round after it leaves that link alone.
	if r := probe(busy, roundTimeout); r.Reason != checks.ReasonReady {
		t.Fatalf("probe of %s: %s (%q), want Ready", busy.Name, r.Reason, r.Message)
	}
	busy.PauseLibvirtd()
	resumed := false
	defer func() {
		if !resumed {
			busy.ResumeLibvirtd()
		}
	}()
	if r := probe(busy, 300*time.Millisecond); r.Reason != checks.ReasonTimeout {
		t.Fatalf("probe of a stalled libvirtd: %s (%q), want Timeout", r.Reason, r.Message)
	}
	if !c.pool.Probing(c.addrs[2]) {
		t.Fatal("the abandoned probe's call is not out")
	}
	subset() // keeps the link: probed since the round before
	subset() // not probed since, but the call is out
	time.Sleep(200 * time.Millisecond)
	open(busy, "while an abandoned call is out on its link")
	busy.ResumeLibvirtd()
	resumed = true
	testutil.Eventually(t, 20*time.Second, "the abandoned call to return", func() bool { return !c.pool.Probing(c.addrs[2]) })
	subset()
	closed(busy, "once its abandoned call returned")

	open(owned, "after every round")
	if n := owned.SSHConnectionsSeen(); n != 1 {
		t.Errorf("%s: %d SSH connections reached it, want 1 (its link was never closed)", owned.Name, n)
	}
}
