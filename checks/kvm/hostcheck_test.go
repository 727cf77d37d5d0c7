package kvm

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestProbeTarget checks one host on demand against real hosts: a healthy host reads Ready with
// a trace of its calls on the pooled link; a hung libvirtd gives Timeout with a trace naming the
// call that hangs; a probe while a round's check holds the host either waits for it or, at its
// deadline, reports busy, never opens a second link, and leaves the round's verdict intact.
func TestProbeTarget(t *testing.T) {
	f := kvmhost.Start(t, 2)
	for _, h := range f.Hosts {
		h.CountSSHConnections()
	}
	p := provider("kvm-probe", f, f.Hosts)
	// Calls may hang for longer than the probes' deadlines below, so that a round's check
	// stuck on a paused libvirtd still holds the host when a probe comes.
	p.Block.(*Config).RPCTimeout = 10 * time.Second
	c := newChecker(t, p)
	h0, h1 := f.Hosts[0], f.Hosts[1]
	probe := func(target string, timeout time.Duration, trace *checks.Trace) (checks.TargetResult, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.ProbeTarget(ctx, target, trace)
	}

	if _, err := probe("no-such-host", time.Second, nil); !errors.Is(err, checks.ErrUnknownTarget) {
		t.Errorf("unknown target: %v, want ErrUnknownTarget", err)
	}

	// Healthy: Ready, the same verdict a round gives, and the trace lists every call.
	tr := checks.NewTrace()
	r, err := probe(h0.Name, 10*time.Second, tr)
	if err != nil {
		t.Fatal(err)
	}
	expectReady(t, h0, r)
	s := tr.String()
	for _, want := range []string{"tcp connect", "ssh handshake", "host key verification", "ssh authentication",
		"opening the libvirt socket", "libvirt connect", "libvirt " + rpcLibVersion, "libvirt " + rpcHostname,
		"libvirt " + rpcPoolLookup, "libvirt " + rpcPoolGetInfo} {
		if !strings.Contains(s, want) {
			t.Errorf("the trace of a first probe lacks %q:\n%s", want, s)
		}
	}
	// The round after it uses the link the probe dialled.
	rs := round(t, c)
	expectReady(t, h0, rs[h0.Name])
	expectReady(t, h1, rs[h1.Name])

	// A nil trace works too (what the rounds pass).
	if r, err := probe(h1.Name, 10*time.Second, nil); err != nil || r.Reason != checks.ReasonReady {
		t.Errorf("probe without a trace: %v %+v", err, r)
	}

	// A hung libvirtd: the probe ends at its deadline with Timeout, and the trace names the call
	// still running.
	h1.PauseLibvirtd()
	resumed := false
	defer func() {
		if !resumed {
			h1.ResumeLibvirtd()
		}
	}()
	tr = checks.NewTrace()
	r, err = probe(h1.Name, time.Second, tr)
	// The connection's facts are known: the check's one call is StoragePoolGetInfo.
	if err != nil || r.Reason != checks.ReasonTimeout || !strings.Contains(r.Message, rpcPoolGetInfo) {
		t.Errorf("probe of a paused libvirtd: %v %s %q, want Timeout naming %s", err, r.Reason, r.Message, rpcPoolGetInfo)
	}
	if s := tr.String(); !regexp.MustCompile("libvirt "+rpcPoolGetInfo+" +NO RESULT: still running").MatchString(s) ||
		!strings.Contains(s, "pooled connection") {
		t.Errorf("the trace of a hung call does not show it running on the pooled connection:\n%s", s)
	}
	h1.ResumeLibvirtd()
	resumed = true
	waitReady := func() {
		t.Helper()
		for i := 0; ; i++ {
			r, err := probe(h1.Name, 10*time.Second, nil)
			if err == nil && r.Reason == checks.ReasonReady {
				return
			}
			if i == 100 {
				t.Fatalf("the host does not read Ready again after SIGCONT: %v %+v", err, r)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitReady()

	// A round's check holds the host (its call hangs on a paused libvirtd) while a probe comes:
	// the probe waits for it until its deadline and reports busy, without a call or a dial of
	// its own. The round, once libvirtd resumes, reads Ready: the probe did not cost it its
	// verdict.
	h1.PauseLibvirtd()
	resumed = false
	roundDone := make(chan []checks.TargetResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		roundDone <- c.Check(ctx)
	}()
	testutil.Eventually(t, 20*time.Second, "the round's check of the paused host to be running", func() bool {
		return c.pool.Probing(c.addrs[1])
	})
	tr = checks.NewTrace()
	r, err = probe(h1.Name, time.Second, tr)
	if !errors.Is(err, checks.ErrBusy) || r.Reason != checks.ReasonTimeout || !r.NotContacted {
		t.Errorf("probe while a round holds the host: %v %+v, want ErrBusy (a not-contacted Timeout)", err, r)
	}
	if s := tr.String(); !strings.Contains(s, "wait for the host's running check") {
		t.Errorf("a busy probe's trace does not show the wait:\n%s", s)
	}
	h1.ResumeLibvirtd()
	resumed = true
	for _, r := range <-roundDone {
		if r.Reason != checks.ReasonReady {
			t.Errorf("the round beside the probe: %s reads %s (%q), want Ready", r.Target, r.Reason, r.Message)
		}
	}
	waitReady()

	for _, h := range f.Hosts {
		if n := h.SSHConnectionsSeen(); n != 1 {
			t.Errorf("%s: %d SSH connections reached the host, want 1 (probes and rounds share the link)", h.Name, n)
		}
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%s: %d SSH connections open, want 1", h.Name, n)
		}
	}
}

// cutProbeLeavesRoundsAlone probes host i of c with a 10ms deadline while slow makes its call
// outlast it (the probe is cut by its own deadline, its call abandoned), lets the call return
// (fast), and checks that the rounds see nothing of it: the pool does not read the host
// unresponsive, the round's order is the same, and the next round reads the host Ready with its
// one steady call (rpcs, when set, counts the calls the host answered).
func cutProbeLeavesRoundsAlone(t *testing.T, c *Checker, i int, slow, fast func(), rpcs func() int64) {
	t.Helper()
	round(t, c) // every host connected, its facts learnt
	order := c.order()
	if got := c.pool.State(c.addrs[i]); got != hostpool.HostConnected {
		t.Fatalf("after a round: the host reads %v, want connected", got)
	}
	slow()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	r, err := c.ProbeTarget(ctx, c.targets[i], nil)
	cancel()
	fast()
	if err != nil || r.Reason != checks.ReasonTimeout {
		t.Fatalf("the 10ms probe of a host whose call takes longer: %v %+v, want a Timeout verdict (cut by its own deadline)", err, r)
	}
	testutil.Eventually(t, 20*time.Second, "the abandoned call to return", func() bool { return !c.pool.Probing(c.addrs[i]) })

	if got := c.pool.State(c.addrs[i]); got != hostpool.HostConnected {
		t.Errorf("after a probe cut by its own deadline: the host reads %v, want connected (only the rounds rank hosts)", got)
	}
	if got := c.order(); !slices.Equal(got, order) {
		t.Errorf("the round's order after the cut probe: %v, want %v as before it", got, order)
	}
	var before int64
	if rpcs != nil {
		before = rpcs()
	}
	if r := round(t, c)[c.targets[i]]; r.Reason != checks.ReasonReady {
		t.Errorf("the round after the cut probe: %s (%q), want Ready", r.Reason, r.Message)
	}
	if rpcs != nil {
		if n := rpcs() - before; n != 1 {
			t.Errorf("the round after the cut probe made %d calls to the host, want 1 (what the connection told still holds)", n)
		}
	}
}

// TestCutProbeLeavesRoundsAlone: a probe cut by its caller's deadline (/probe's timeout=10ms)
// never changes how the rounds rank or treat the host. On the scale stand-in, a healthy host
// whose every call takes 200ms; the second host is checked first or not by rank alone.
func TestCutProbeLeavesRoundsAlone(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 2})
	k := fleetConfig(f.KVMConfig())
	k.Concurrency = 1
	c := newChecker(t, config.Provider{Name: "kvm-cut", Type: "kvm", Block: &k})
	h := f.Hosts[0]
	cutProbeLeavesRoundsAlone(t, c, 0, func() { h.SetRPCDelay(200 * time.Millisecond) }, func() { h.SetRPCDelay(0) }, h.RPCs)
}

// TestCutProbeLeavesRoundsAloneRealHost is the same on real hosts (sshd + libvirtd): the
// host's libvirtd stalls (SIGSTOP) for the probe's call, then answers again.
func TestCutProbeLeavesRoundsAloneRealHost(t *testing.T) {
	f := kvmhost.Start(t, 2)
	p := provider("kvm-cut-real", f, f.Hosts)
	p.Block.(*Config).Concurrency = 1
	c := newChecker(t, p)
	h := f.Hosts[0]
	cutProbeLeavesRoundsAlone(t, c, 0, h.PauseLibvirtd, h.ResumeLibvirtd, nil)
}
