package kvm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
)

// TestFailingHostsDoNotStarveHealthyOnes is the property, on the scale stand-in
// (in-process SSH + libvirt RPC servers on loopback; the silent and dropping hosts are real
// sockets: one accepts TCP and never speaks, the other's full accept queue makes the kernel
// drop SYNs): with concurrency 8, 40 healthy hosts, 16 that accept TCP and never answer and
// 16 that drop packets, every healthy host reads Ready in every round from the second on, and
// every dead host reads the reason of a stage it actually reached, or Timeout.
func TestFailingHostsDoNotStarveHealthyOnes(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 40, Silent: 16, Dropping: 16})
	k := fleetConfig(f.KVMConfig())
	k.Concurrency = 8
	// The stage bounds a healthy host must meet leave a loaded machine's dials (race detector
	// on) room to finish.
	k.TCPTimeout, k.SSHTimeout, k.LibvirtTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	// Dead and healthy hosts interleaved, as a rack outage leaves them in a real host list.
	rand.New(rand.NewPCG(12, 12)).Shuffle(len(k.Hosts), func(i, j int) { k.Hosts[i], k.Hosts[j] = k.Hosts[j], k.Hosts[i] })
	// Every dead host is dialled again in every round: the healthy ones must stay Ready.
	c, err := newTuned(config.Provider{Name: "kvm-partial", Type: "kvm", Block: &k}, nil, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	mode := map[string]kvmstandin.Mode{}
	for _, h := range f.Hosts {
		mode[h.Name] = h.Mode
	}
	// Every round tries all 32 dead hosts: 32 × 2s over 8 slots, about 8s.
	const rounds, timeout = 3, 20 * time.Second
	logins := map[string]int64{}
	for n := 1; n <= rounds; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		rs := c.Check(ctx)
		cancel()
		var ready, dead int
		for _, r := range rs {
			switch mode[r.Target] {
			case kvmstandin.Healthy:
				if r.Reason == checks.ReasonReady {
					ready++
				} else if n >= 2 {
					t.Errorf("round %d: healthy %s reads %s (%q), want Ready", n, r.Target, r.Reason, r.Message)
				}
			case kvmstandin.Silent:
				dead++
				if !(r.Reason == ReasonSSHHandshakeFailed && strings.Contains(r.Message, "no answer within")) && r.Reason != checks.ReasonTimeout {
					t.Errorf("round %d: silent %s reads %s (%q), want SSHHandshakeFailed (its bound expired) or Timeout", n, r.Target, r.Reason, r.Message)
				}
			case kvmstandin.Dropping:
				dead++
				if !(r.Reason == ReasonTCPUnreachable && strings.Contains(r.Message, "no answer within")) && r.Reason != checks.ReasonTimeout {
					t.Errorf("round %d: dropping %s reads %s (%q), want TCPUnreachable (its bound expired) or Timeout", n, r.Target, r.Reason, r.Message)
				}
			}
		}
		t.Logf("round %d: %d of 40 healthy hosts Ready, %d dead hosts checked", n, ready, dead)
		if n == 2 {
			for _, h := range f.Hosts {
				logins[h.Name] = h.Authentications()
			}
		}
	}
	// From the second round on, the healthy hosts kept their links: no new login.
	for _, h := range f.Hosts {
		if h.Mode == kvmstandin.Healthy && (h.Authentications() != logins[h.Name] || h.Authentications() == 0) {
			t.Errorf("%s: %d SSH logins after round 2, %d at the end: the link of a healthy host must be kept",
				h.Name, logins[h.Name], h.Authentications())
		}
	}
}

// TestFailingHostsDoNotStarveHealthyOnesRealHosts is the same property at the size real hosts
// afford on a 2-core machine: 4 real healthy hosts (sshd + libvirtd), 2 real hosts behind an
// iptables DROP rule in their namespace, and 4 listeners that accept TCP and never speak (plain
// sockets in the test process, standing in for a hung sshd); concurrency 2.
func TestFailingHostsDoNotStarveHealthyOnesRealHosts(t *testing.T) {
	f := kvmhost.Start(t, 6)
	healthyHosts, dropping := f.Hosts[:4], f.Hosts[4:]
	for _, h := range dropping {
		h.MakeUnreachable()
	}
	p := provider("kvm-partial-real", f, healthyHosts)
	k := p.Block.(*Config)
	k.Concurrency = 2
	k.TCPTimeout, k.SSHTimeout, k.LibvirtTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	kind := map[string]string{}
	for _, h := range healthyHosts {
		kind[h.Name] = "healthy"
	}
	for _, h := range dropping {
		k.Hosts = append(k.Hosts, Host{Address: h.Addr, Name: h.Name})
		kind[h.Name] = "dropping"
	}
	for i := range 4 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held := make(chan net.Conn, 64)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held <- c // never answered
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			for len(held) > 0 {
				(<-held).Close()
			}
		})
		name := "silent-" + strconv.Itoa(i)
		k.Hosts = append(k.Hosts, Host{Address: ln.Addr().String(), Name: name})
		kind[name] = "silent"
	}
	// Interleaved, dead hosts first: the worst order for a first-come scheduler.
	slices.Reverse(k.Hosts)
	c, err := newTuned(p, nil, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	logins := map[string]int{}
	for n := 1; n <= 3; n++ {
		if n == 3 {
			for _, h := range healthyHosts {
				logins[h.Name] = h.Logins()
			}
		}
		// 2 dropping and 4 silent hosts, each holding one of 2 slots for 2s: about 6s.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rs := c.Check(ctx)
		cancel()
		for _, r := range rs {
			switch kind[r.Target] {
			case "healthy":
				if n >= 2 && r.Reason != checks.ReasonReady {
					t.Errorf("round %d: healthy %s reads %s (%q), want Ready", n, r.Target, r.Reason, r.Message)
				}
			case "silent":
				if !(r.Reason == ReasonSSHHandshakeFailed && strings.Contains(r.Message, "no answer within")) && r.Reason != checks.ReasonTimeout {
					t.Errorf("round %d: silent %s reads %s (%q)", n, r.Target, r.Reason, r.Message)
				}
			case "dropping":
				if !(r.Reason == ReasonTCPUnreachable && strings.Contains(r.Message, "no answer within")) && r.Reason != checks.ReasonTimeout {
					t.Errorf("round %d: dropping %s reads %s (%q)", n, r.Target, r.Reason, r.Message)
				}
			default:
				t.Errorf("unexpected target %s", r.Target)
			}
		}
	}
	for _, h := range healthyHosts {
		if n := h.Logins(); n != logins[h.Name] || n == 0 {
			t.Errorf("%s: %d SSH logins before round 3, %d after: the link of a healthy host must be kept", h.Name, logins[h.Name], n)
		}
	}
}

// TestLateHostsReadTimeout is the "wrong stage blamed", on the scale stand-in: 300
// healthy hosts, a cold start, and a round too short to dial them all. Hosts that got their
// turn late are cut by the round's deadline in the middle of some dial stage: they must read
// Timeout (naming the stage), never that stage's reason (SSHAuthFailed, SSHHandshakeFailed,
// LibvirtSocketUnreachable, ...), since no stage failed and no stage's own bound expired.
func TestLateHostsReadTimeout(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 300})
	// Every dial outlasts the round, in one of two stages: on half the hosts sshd starts the
	// handshake 3s late (cut in the ssh handshake), on the other half libvirt answers each call
	// 1.5s late (cut in libvirt's connect, after its auth list). The default stage bounds end
	// later than the round, so only the round's deadline cuts them. The round is long enough
	// for the SSH handshakes of the first slots to finish on a loaded machine, so that some
	// dials reach libvirt's connect.
	for i, h := range f.Hosts {
		if i%2 == 0 {
			h.SetSSHDelay(3 * time.Second)
		} else {
			h.SetRPCDelay(1500 * time.Millisecond)
		}
	}
	k := fleetConfig(f.KVMConfig())
	// Bounds far beyond the round, so that only the round's deadline cuts the dials.
	k.SSHTimeout, k.LibvirtTimeout, k.RPCTimeout = 20*time.Second, 20*time.Second, 20*time.Second
	c, err := newTuned(config.Provider{Name: "kvm-late", Type: "kvm", Block: &k}, nil, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reasons := map[checks.Reason]int{}
	cutInStage := 0
	stages := map[string]int{}
	for _, r := range c.Check(ctx) {
		reasons[r.Reason]++
		switch r.Reason {
		case checks.ReasonReady:
		case checks.ReasonTimeout:
			if _, after, ok := strings.Cut(r.Message, "at stage "); ok {
				cutInStage++
				stage, _, _ := strings.Cut(after, ":")
				stages[stage]++
			}
		default:
			t.Errorf("%s: %s (%q): a healthy host cut by the round's deadline must read Timeout", r.Target, r.Reason, r.Message)
		}
	}
	t.Logf("verdicts: %v; %d cut during a dial stage: %v", reasons, cutInStage, stages)
	if stages[string(hostpool.StageSSHHandshake)] == 0 || stages[string(hostpool.StageLibvirtConnect)] == 0 {
		t.Errorf("dials cut by stage: %v, want some in ssh_handshake and in libvirt_connect: the property was not exercised", stages)
	}
}

// TestSilentHostIsDialledEveryRound, on the scale stand-in (a host that accepts TCP and never
// speaks SSH): every round dials it again (a host that came back must read Ready at the next
// round), each time its handshake's bound expires, and the pool marks it unresponsive so that
// the next round takes it after the healthy host.
func TestSilentHostIsDialledEveryRound(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Silent: 1, Healthy: 1})
	silent, healthy := f.Hosts[0], f.Hosts[1]
	if silent.Mode != kvmstandin.Silent {
		silent, healthy = healthy, silent
	}
	k := fleetConfig(f.KVMConfig())
	k.SSHTimeout = 2 * time.Second // the healthy host's handshake must finish within it
	c, err := newTuned(config.Provider{Name: "kvm-silent", Type: "kvm", Block: &k}, nil, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for n := 1; n <= 3; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rs := c.Check(ctx)
		cancel()
		var r checks.TargetResult
		for _, x := range rs {
			if x.Target == silent.Name {
				r = x
			}
		}
		if r.Reason != ReasonSSHHandshakeFailed || r.NotContacted || silent.Accepted() != int64(n) {
			t.Errorf("round %d: %s (%q, not contacted %v), %d connections; want SSHHandshakeFailed after a new connection (%d)",
				n, r.Reason, r.Message, r.NotContacted, silent.Accepted(), n)
		}
		if st := c.pool.State(silent.Addr); st != hostpool.HostUnresponsive {
			t.Errorf("round %d: the silent host's state is %v, want HostUnresponsive", n, st)
		}
	}
	order := c.order()
	if c.targets[order[0]] != healthy.Name {
		t.Errorf("order after the rounds: %v first, want the healthy host before the unresponsive one", c.targets[order[0]])
	}
}

// TestDerivedConcurrencyFollowsTheShare: a provider whose block sets no concurrency has, in a
// round, the slots of the hosts that round checks (DefaultConcurrencyFor), not of every host
// configured: a sharded replica owning 64 hosts of 2,000 (which would get 100 slots) checks them
// with 32. The 64 are silent (TCP accepted, SSH never spoken), so each started host holds its
// slot for the SSH bound, longer than the round: exactly the 32 without a slot read "not
// started". A block that sets a concurrency keeps it whatever the share.
func TestDerivedConcurrencyFollowsTheShare(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Silent: 64})
	var owned []string
	for _, h := range f.Hosts {
		owned = append(owned, h.Name)
	}
	const configured = 2000
	for _, tc := range []struct {
		name       string
		derived    bool
		notStarted int
	}{{"derived", true, 64 - DefaultConcurrency}, {"set", false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			k := fleetConfig(f.KVMConfig())
			for i := len(k.Hosts); i < configured; i++ {
				k.Hosts = append(k.Hosts, Host{Address: fmt.Sprintf("192.0.2.%d:%d", i%250+1, 1000+i), Name: fmt.Sprintf("not-owned-%d", i)})
			}
			k.Concurrency, k.ConcurrencyDerived = DefaultConcurrencyFor(configured), tc.derived
			if k.Concurrency < len(owned) {
				t.Fatalf("DefaultConcurrencyFor(%d) = %d: the test needs more slots than the %d hosts owned", configured, k.Concurrency, len(owned))
			}
			// The SSH bound is far longer than the round: a started host keeps its slot to
			// the round's end.
			k.SSHTimeout = time.Minute
			c, err := newTuned(config.Provider{Name: "kvm-share-" + tc.name, Type: "kvm", Block: &k}, nil, tuning{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			rs := c.CheckTargets(ctx, owned)
			cancel()
			if len(rs) != len(owned) {
				t.Fatalf("%d results for the %d hosts owned", len(rs), len(owned))
			}
			notStarted := 0
			for _, r := range rs {
				if strings.Contains(r.Message, "not started") {
					notStarted++
				}
			}
			if notStarted != tc.notStarted {
				t.Errorf("%d hosts not started for want of a slot, want %d", notStarted, tc.notStarted)
			}
		})
	}
}
