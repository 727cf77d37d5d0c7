package kvm

import (
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// The bounds of these tests. Every bound that a live host must meet is at least 2s, so that a
// loaded machine does not turn a slow answer into a fault; the round's deadline leaves room for
// one stage's bound and a call's after the healthy stages.
const (
	// roundTimeout is the deadline of one round.
	roundTimeout = 6 * time.Second
	// stageTimeout is each dial stage's own bound (TCP, SSH, libvirt).
	stageTimeout = 2 * time.Second
	// testRPCTimeout is the bound of each libvirt call.
	testRPCTimeout = 2 * time.Second
)

func provider(name string, f *kvmhost.Fleet, hosts []*kvmhost.Host) config.Provider {
	k := &Config{
		User:           f.User,
		PrivateKeyFile: f.ClientKeyPath,
		KnownHostsFile: f.KnownHostsPath,
		Port:           DefaultPort,
		Socket:         hosts[0].Socket,
		StoragePool:    hosts[0].Pool,
		Concurrency:    DefaultConcurrency,
		// Each stage's own bound expires inside the round, so a fault reads its stage's reason.
		TCPTimeout:     stageTimeout,
		SSHTimeout:     stageTimeout,
		LibvirtTimeout: stageTimeout,
		// Each call's bound, too: a hung libvirtd costs this, not the round.
		RPCTimeout: testRPCTimeout,
	}
	for _, h := range hosts {
		k.Hosts = append(k.Hosts, Host{Address: h.Addr, Name: h.Name})
	}
	return config.Provider{Name: name, Type: "kvm", Block: k}
}

func newChecker(t *testing.T, p config.Provider) *Checker {
	t.Helper()
	c, err := newTuned(p, nil, tuning{
		KeepaliveInterval: 200 * time.Millisecond,
		KeepaliveTimeout:  5 * time.Second,
		DisconnectTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// round runs one check with the test's deadline and returns the verdicts by target. It fails
// the test when the round or a verdict took longer than the deadline plus a second (the issue's
// bound: a fault gives its reason within timeout + 1s).
func round(t *testing.T, c *Checker) map[string]checks.TargetResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
	defer cancel()
	start := time.Now()
	rs := c.Check(ctx)
	if took := time.Since(start); took > roundTimeout+time.Second {
		t.Errorf("the round took %s, want at most the timeout %s + 1s", took, roundTimeout)
	}
	if len(rs) != len(c.Targets()) {
		t.Fatalf("%d verdicts for %d targets", len(rs), len(c.Targets()))
	}
	out := map[string]checks.TargetResult{}
	for _, r := range rs {
		if !checks.ValidReason(Type, r.Reason) || r.Up != (r.Reason == checks.ReasonReady) {
			t.Errorf("%s: invalid verdict %+v", r.Target, r)
		}
		if r.Duration > roundTimeout+time.Second {
			t.Errorf("%s: verdict %s after %s, want within %s", r.Target, r.Reason, r.Duration, roundTimeout+time.Second)
		}
		out[r.Target] = r
	}
	return out
}

func expect(t *testing.T, got checks.TargetResult, want checks.Reason, msgPart string) {
	t.Helper()
	if got.Reason != want || !strings.Contains(got.Message, msgPart) {
		t.Errorf("%s: got %s (%q), want %s with %q", got.Target, got.Reason, got.Message, want, msgPart)
	}
}

func expectReady(t *testing.T, h *kvmhost.Host, got checks.TargetResult) {
	t.Helper()
	if got.Reason != checks.ReasonReady || !got.Up {
		t.Errorf("%s: got %s (%q), want Ready", h.Name, got.Reason, got.Message)
		return
	}
	if !strings.Contains(got.Message, h.Hostname) || !strings.Contains(got.Message, "libvirt ") {
		t.Errorf("%s: message %q lacks the libvirt version or hostname %s", h.Name, got.Message, h.Hostname)
	}
	info := h.PoolInfo()
	want := PoolSamples(h.Pool, info.Capacity, info.Allocation, info.Available)
	if !reflect.DeepEqual(got.Samples, want) {
		t.Errorf("%s: pool samples %+v, want what virsh pool-info says: %+v", h.Name, got.Samples, want)
	}
}

// TestKVM runs the check against three real hosts: all ready, then each fault on one host gives
// its reason (the other hosts stay ready) and the host recovers on the next round once undone.
func TestKVM(t *testing.T) {
	f := kvmhost.Start(t, 3)
	c := newChecker(t, provider("kvm-test", f, f.Hosts))
	stats := func() poolView { return viewPool(t, "kvm-test", f.Hosts) }

	t.Run("ready", func(t *testing.T) {
		rs := round(t, c)
		for _, h := range f.Hosts {
			expectReady(t, h, rs[h.Name])
			if n := h.TCPConnections(); n != 1 {
				t.Errorf("%s: %d TCP connections, want 1", h.Name, n)
			}
		}
		// Steady state: the next round dials nothing.
		before := stats()
		rs = round(t, c)
		for _, h := range f.Hosts {
			expectReady(t, h, rs[h.Name])
		}
		if after := stats(); after.Handshakes != before.Handshakes || after.Dials["ok"] != before.Dials["ok"] {
			t.Errorf("a steady-state round dialled: %+v -> %+v", before, after)
		}
	})

	// fault applies a fault to host i, expects reason, undoes it and expects Ready.
	fault := func(i int, do func(*kvmhost.Host), want checks.Reason, msgPart string, undo func(*kvmhost.Host)) {
		t.Helper()
		h := f.Hosts[i]
		do(h)
		rs := round(t, c)
		expect(t, rs[h.Name], want, msgPart)
		if len(rs[h.Name].Samples) > 0 {
			t.Errorf("%s: pool sizes reported with %s", h.Name, rs[h.Name].Reason)
		}
		for _, o := range f.Hosts {
			if o != h {
				expectReady(t, o, rs[o.Name])
			}
		}
		undo(h)
		expectReady(t, h, round(t, c)[h.Name])
	}

	t.Run("sshd stopped", func(t *testing.T) {
		fault(0, func(h *kvmhost.Host) {
			h.StopSSHD()
			h.KillSSHConnections() // stopping sshd leaves established links; a redial meets no listener
			testutil.Eventually(t, 15*time.Second, "the link to close", func() bool { return stats().Links == 2 })
		}, ReasonTCPUnreachable, "connection refused", (*kvmhost.Host).StartSSHD)
	})
	t.Run("libvirtd stopped", func(t *testing.T) {
		before := stats()
		fault(1, (*kvmhost.Host).StopLibvirtd, ReasonLibvirtSocketUnreachable, "libvirt socket",
			(*kvmhost.Host).StartLibvirtd)
		// libvirt reconnected over the SSH link that stayed up.
		if after := stats(); after.Handshakes != before.Handshakes {
			t.Errorf("SSH redialled for a libvirtd restart: %d -> %d handshakes", before.Handshakes, after.Handshakes)
		}
	})
	t.Run("pool destroyed", func(t *testing.T) {
		fault(2, (*kvmhost.Host).DestroyPool, ReasonPoolInactive, "inactive", (*kvmhost.Host).StartPool)
	})
	t.Run("pool undefined", func(t *testing.T) {
		fault(0, (*kvmhost.Host).UndefinePool, ReasonPoolNotFound, f.Hosts[0].Pool, (*kvmhost.Host).DefinePool)
	})
	t.Run("host key replaced", func(t *testing.T) {
		fault(1, func(h *kvmhost.Host) {
			h.ReplaceHostKey()
			h.KillSSHConnections()
			testutil.Eventually(t, 15*time.Second, "the link to close", func() bool { return stats().Links == 2 })
		}, ReasonHostKeyMismatch, "key mismatch", func(h *kvmhost.Host) {
			// The operator verifies the new keys and updates known_hosts: no reload needed.
			replaceKnownHosts(t, f, h)
		})
	})
	t.Run("address unreachable", func(t *testing.T) {
		fault(2, func(h *kvmhost.Host) {
			h.MakeUnreachable()
			// The established link goes silent: the keepalive closes it, then the redial hangs.
			testutil.Eventually(t, 15*time.Second, "the keepalive to close the silent link", func() bool { return stats().Links == 2 })
		}, ReasonTCPUnreachable, "no answer within the stage's bound of "+stageTimeout.String(), (*kvmhost.Host).MakeReachable)
	})
	t.Run("ssh link killed", func(t *testing.T) {
		h := f.Hosts[0]
		before := stats()
		h.KillSSHConnections()
		testutil.Eventually(t, 15*time.Second, "the pool to notice the dead link", func() bool { return stats().Links == 2 })
		expectReady(t, h, round(t, c)[h.Name])
		if after := stats(); after.Handshakes != before.Handshakes+1 {
			t.Errorf("handshakes %d -> %d, want one redial", before.Handshakes, after.Handshakes)
		}
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%d TCP connections after the redial, want 1", n)
		}
	})
	t.Run("hung libvirtd", func(t *testing.T) {
		h := f.Hosts[1]
		expectReady(t, h, round(t, c)[h.Name])
		before := stats()
		h.PauseLibvirtd()
		paused := true
		defer func() {
			if paused {
				h.ResumeLibvirtd()
			}
		}()
		r := round(t, c)[h.Name]
		// Cut by the call's own bound, not by the round's deadline: the host holds its slot no
		// longer than that. On a connection checked before, the check's one call is
		// StoragePoolGetInfo.
		expect(t, r, checks.ReasonTimeout, "no reply to StoragePoolGetInfo within rpcTimeout ("+testRPCTimeout.String()+")")
		if r.Duration < testRPCTimeout || r.Duration >= roundTimeout {
			t.Errorf("the first round returned after %s, want the call's bound (%v), before the round's deadline (%v)", r.Duration, testRPCTimeout, roundTimeout)
		}
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%d TCP connections, want 1", n)
		}
		for range 2 {
			// The next rounds report Timeout at once: the abandoned probe is still out.
			r := round(t, c)[h.Name]
			expect(t, r, checks.ReasonTimeout, "has still not returned")
			if r.Duration >= roundTimeout {
				t.Errorf("a round behind an abandoned probe took %s, want at once", r.Duration)
			}
			if n := h.TCPConnections(); n != 1 {
				t.Errorf("%d TCP connections, want 1", n)
			}
		}
		if s := stats(); s.AbandonedProbes != 1 {
			t.Errorf("abandoned probes %d, want 1", s.AbandonedProbes)
		}
		h.ResumeLibvirtd()
		paused = false
		testutil.Eventually(t, 15*time.Second, "the abandoned probe to return", func() bool { return stats().AbandonedProbes == 0 })
		expectReady(t, h, round(t, c)[h.Name])
		after := stats()
		if after.Handshakes != before.Handshakes || after.Dials["ok"] != before.Dials["ok"] {
			t.Errorf("the host was redialled: %+v -> %+v", before, after)
		}
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%d TCP connections after resume, want 1 (the same)", n)
		}
	})
	t.Run("close", func(t *testing.T) {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for _, h := range f.Hosts {
			testutil.Eventually(t, 15*time.Second, h.Name+" to see its connection closed", func() bool { return h.TCPConnections() == 0 })
		}
		if s := stats(); s.Present {
			t.Errorf("after close the pool's series remain: %+v", s)
		}
		ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
		defer cancel()
		for _, r := range c.Check(ctx) {
			expect(t, r, checks.ReasonTimeout, "closed")
		}
	})
}

// replaceKnownHosts rewrites the fleet's known_hosts with h's current keys.
func replaceKnownHosts(t *testing.T, f *kvmhost.Fleet, h *kvmhost.Host) {
	t.Helper()
	old, err := os.ReadFile(f.KnownHostsPath)
	if err != nil {
		t.Fatal(err)
	}
	norm := knownhosts.Normalize(h.Addr)
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(string(old)), "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && fields[0] == norm {
			continue
		}
		b.WriteString(line + "\n")
	}
	for _, k := range h.HostKeys {
		b.WriteString(knownhosts.Line([]string{norm}, k) + "\n")
	}
	if err := os.WriteFile(f.KnownHostsPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKeyMaterial: key problems are verdicts on every host, and a fixed key file is picked up
// at the next round without rebuilding the checker.
func TestKeyMaterial(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	dir := t.TempDir()

	t.Run("key file missing, then restored", func(t *testing.T) {
		p := provider("kvm-key-missing", f, f.Hosts)
		p.Block.(*Config).PrivateKeyFile = filepath.Join(dir, "id_moved")
		c := newChecker(t, p)
		expect(t, round(t, c)[h.Name], ReasonKeyMaterialError, "id_moved")
		key, err := os.ReadFile(f.ClientKeyPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p.Block.(*Config).PrivateKeyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
		expectReady(t, h, round(t, c)[h.Name])
	})

	encrypted := filepath.Join(dir, "id_encrypted")
	writeEncrypted(t, f.ClientKeyPath, encrypted, "correct horse")
	t.Run("encrypted key without passphrase", func(t *testing.T) {
		p := provider("kvm-key-encrypted", f, f.Hosts)
		p.Block.(*Config).PrivateKeyFile = encrypted
		c := newChecker(t, p)
		expect(t, round(t, c)[h.Name], ReasonKeyMaterialError, "passphrase")
	})
	t.Run("encrypted key with passphrase file", func(t *testing.T) {
		pass := filepath.Join(dir, "passphrase")
		if err := os.WriteFile(pass, []byte("correct horse\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := provider("kvm-key-passphrase", f, f.Hosts)
		p.Block.(*Config).PrivateKeyFile, p.Block.(*Config).PassphraseFile = encrypted, pass
		expectReady(t, h, round(t, newChecker(t, p))[h.Name])
	})
	t.Run("host missing from known_hosts", func(t *testing.T) {
		kh := filepath.Join(dir, "known_hosts_empty")
		if err := os.WriteFile(kh, []byte("# no hosts\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := provider("kvm-unknown-host", f, f.Hosts)
		p.Block.(*Config).KnownHostsFile = kh
		expect(t, round(t, newChecker(t, p))[h.Name], ReasonHostKeyUnknown, "key is unknown")
	})
	t.Run("key not authorized", func(t *testing.T) {
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		block, err := ssh.MarshalPrivateKey(priv, "stranger")
		if err != nil {
			t.Fatal(err)
		}
		stranger := filepath.Join(dir, "id_stranger")
		if err := os.WriteFile(stranger, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		p := provider("kvm-stranger", f, f.Hosts)
		p.Block.(*Config).PrivateKeyFile = stranger
		expect(t, round(t, newChecker(t, p))[h.Name], ReasonSSHAuthFailed, "unable to authenticate")
	})
	t.Run("insecure skip host key verification", func(t *testing.T) {
		p := provider("kvm-insecure", f, f.Hosts)
		p.Block.(*Config).KnownHostsFile = ""
		p.Block.(*Config).InsecureSkipHostKeyVerification = true
		expectReady(t, h, round(t, newChecker(t, p))[h.Name])
	})
	t.Run("concurrency one", func(t *testing.T) {
		p := provider("kvm-serial", f, f.Hosts)
		p.Block.(*Config).Concurrency = 1
		p.Block.(*Config).Hosts = append(p.Block.(*Config).Hosts, Host{Address: h.Addr, Name: "same-host-again"})
		rs := round(t, newChecker(t, p))
		expectReady(t, h, rs[h.Name])
		if rs["same-host-again"].Reason != checks.ReasonReady {
			t.Errorf("second target: %+v", rs["same-host-again"])
		}
	})
}

func writeEncrypted(t *testing.T, from, to, passphrase string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.ParseRawPrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(key, "encrypted", []byte(passphrase))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClassify covers the mapping of errors to reasons without hosts.
func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("probe: %w", err) }
	cases := []struct {
		err  error
		want checks.Reason
	}{
		{wrap(hostpool.ErrProbeBusy), checks.ReasonTimeout},
		{wrap(errors.Join(hostpool.ErrProbeAbandoned, context.DeadlineExceeded)), checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageTCP, Err: context.DeadlineExceeded}, ReasonTCPUnreachable},
		{&hostpool.DialError{Stage: hostpool.StageSSHHandshake, Err: context.DeadlineExceeded}, ReasonSSHHandshakeFailed},
		{&hostpool.DialError{Stage: hostpool.StageTCP, Err: context.Canceled, Aborted: true}, checks.ReasonTimeout},
		// Cut short by the round's deadline: never the stage's reason, whatever the stage.
		{&hostpool.DialError{Stage: hostpool.StageSSHHandshake, Err: context.DeadlineExceeded, Aborted: true}, checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageSSHAuth, Err: context.DeadlineExceeded, Aborted: true}, checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageLibvirtSocket, Err: context.DeadlineExceeded, Aborted: true}, checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageSSHAuth, Err: hostpool.ErrClosed, Aborted: true}, checks.ReasonTimeout},
		// A call that ran out rpcTimeout, and a host that ran out its whole bound.
		{wrap(errors.Join(hostpool.ErrProbeAbandoned, &callTimeoutError{rpcPoolGetInfo, time.Second})), checks.ReasonTimeout},
		{wrap(errors.Join(hostpool.ErrProbeAbandoned, &hostBoundError{10 * time.Second})), checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageTCP, Err: fmt.Errorf("cut short (%w)", &hostBoundError{time.Second}), Aborted: true}, checks.ReasonTimeout},
		{wrap(hostpool.ErrProbeRunning), checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageKeyMaterial, Err: os.ErrNotExist}, ReasonKeyMaterialError},
		{&hostpool.DialError{Stage: hostpool.StageTCP, Err: errors.New("refused")}, ReasonTCPUnreachable},
		{&hostpool.DialError{Stage: hostpool.StageSSHHandshake, Err: errors.New("eof")}, ReasonSSHHandshakeFailed},
		{&hostpool.DialError{Stage: hostpool.StageSSHAuth, Err: errors.New("no")}, ReasonSSHAuthFailed},
		{&hostpool.DialError{Stage: hostpool.StageHostKey, Err: &knownhosts.KeyError{}}, ReasonHostKeyUnknown},
		{&hostpool.DialError{Stage: hostpool.StageHostKey, Err: &knownhosts.KeyError{Want: []knownhosts.KnownKey{{}}}}, ReasonHostKeyMismatch},
		{&hostpool.DialError{Stage: hostpool.StageLibvirtSocket, Err: &ssh.OpenChannelError{}}, ReasonLibvirtSocketUnreachable},
		{&hostpool.DialError{Stage: hostpool.StageLibvirtConnect, Err: errors.New("eof")}, ReasonLibvirtConnectFailed},
		{&hostpool.DialError{Stage: hostpool.StageLibvirtConnect, Err: context.DeadlineExceeded}, checks.ReasonTimeout},
		{&hostpool.DialError{Stage: hostpool.StageLibvirtSocket, Err: context.DeadlineExceeded}, ReasonLibvirtSocketUnreachable},
		{&hostpool.DialError{Stage: hostpool.StageSSHAuth, Err: context.DeadlineExceeded}, ReasonSSHAuthFailed},
		{fmt.Errorf("waiting for the slot: %w", context.DeadlineExceeded), checks.ReasonTimeout},
		{&rpcError{rpcPoolLookup, libvirt.Error{Code: uint32(libvirt.ErrNoStoragePool), Message: "no pool"}}, ReasonPoolNotFound},
		{&rpcError{rpcHostname, libvirt.Error{Code: 1, Message: "internal"}}, ReasonLibvirtError},
		{&rpcError{rpcHostname, libvirt.ErrInterrupted}, ReasonLibvirtError},
		{hostpool.ErrClosed, checks.ReasonTimeout},
	}
	for _, tc := range cases {
		if got, msg := classify(tc.err, rpcHostname); got != tc.want || msg == "" {
			t.Errorf("classify(%v) = %s %q, want %s", tc.err, got, msg, tc.want)
		}
	}
	if _, msg := classify(&hostpool.DialError{Stage: hostpool.StageSSHAuth, Err: context.DeadlineExceeded, Aborted: true}, ""); !strings.Contains(msg, "at stage ssh_auth") {
		t.Errorf("a cut dial's message %q does not name the stage it reached", msg)
	}
	if _, msg := classify(wrap(errors.Join(hostpool.ErrProbeAbandoned, &callTimeoutError{rpcPoolGetInfo, 1500 * time.Millisecond})), rpcHostname); !strings.Contains(msg, "no reply to StoragePoolGetInfo within rpcTimeout (1.5s)") {
		t.Errorf("a call cut by its bound reads %q: the message must name the call and its bound", msg)
	}
	if _, msg := classify(&hostpool.DialError{Stage: hostpool.StageTCP, Err: fmt.Errorf("cut short (%w)", &hostBoundError{time.Second}), Aborted: true}, ""); !strings.Contains(msg, "the host's own bound") {
		t.Errorf("a second dial cut by the host's bound reads %q: it must not blame the round's deadline", msg)
	}
	if _, msg := classify(wrap(hostpool.ErrProbeRunning), ""); strings.Contains(msg, "hung") {
		t.Errorf("a probe merely running reads %q: it must not suggest a hung libvirtd", msg)
	}
	if !connectionLost(fmt.Errorf("ConnectGetLibVersion: %w", syscall.EINVAL)) || !connectionLost(libvirt.ErrInterrupted) || connectionLost(errors.New("other")) {
		t.Error("connectionLost: EINVAL and ErrInterrupted are a lost connection, nothing else")
	}
	if got := libVersion(10000003); got != "10.0.3" {
		t.Errorf("libVersion = %s", got)
	}
	if got := bytesIEC(3 << 30); got != "3.0 GiB" {
		t.Errorf("bytesIEC = %s", got)
	}
}

// TestHostTextIsSanitized: what a host says (libvirt's error text, sshd's) reaches a verdict's
// message, which /probe's debug output shows as it is: control characters become spaces and the
// message is cut at checks.MaxMessageLen, whatever the host sent.
func TestHostTextIsSanitized(t *testing.T) {
	hostText := "pool broken\x1b]0;owned\x07\r\n\x1b[2J" + strings.Repeat("more\n", 5000)
	reason, msg := classify(&rpcError{rpcPoolGetInfo, libvirt.Error{Code: 1, Message: hostText}}, "")
	v := verdict("hv1", time.Now(), reason, msg, nil)
	if v.Reason != ReasonLibvirtError {
		t.Fatalf("reason %s, want LibvirtError", v.Reason)
	}
	if len(v.Message) > checks.MaxMessageLen || strings.ContainsFunc(v.Message, unicode.IsControl) {
		t.Errorf("message %q (%d bytes): want no control character and at most %d bytes", v.Message, len(v.Message), checks.MaxMessageLen)
	}
	if !strings.Contains(v.Message, "pool broken ]0;owned [2Jmore more") || !strings.HasSuffix(v.Message, "...") {
		t.Errorf("message %q: want the host's text with spaces for its control characters, cut with ...", v.Message)
	}
	trace := checks.NewTrace()
	trace.Begin(rpcPoolGetInfo)(hostText)
	if st := trace.Stages(); len(st) != 1 || len(st[0].Result) > checks.MaxMessageLen || strings.ContainsFunc(st[0].Result, unicode.IsControl) {
		t.Errorf("trace stage %+v: want its result sanitized", st)
	}
}

// TestNew rejects providers it cannot check and exposes what the runner needs.
func TestNew(t *testing.T) {
	if _, err := New(config.Provider{Name: "x", Type: "kvm"}, nil); err == nil {
		t.Error("a provider without a kvm block was accepted")
	}
	p := config.Provider{Name: "lab", Type: "kvm", Block: &Config{
		User: "root", PrivateKeyFile: "/nonexistent", KnownHostsFile: "/nonexistent", StoragePool: "default",
		Hosts: []Host{{Address: "198.18.0.2", Name: "hv1"}, {Address: "198.18.0.6:2222", Name: "hv2"}},
	}}
	c, err := New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.(interface{ Close() error }).Close()
	if c.Name() != "lab" || c.Type() != Type || strings.Join(c.Targets(), ",") != "hv1,hv2" {
		t.Errorf("got %s %s %v", c.Name(), c.Type(), c.Targets())
	}
	if got := c.(*Checker).addrs; got[0] != "198.18.0.2:22" || got[1] != "198.18.0.6:2222" {
		t.Errorf("dial addresses %v", got)
	}
	// No host is contacted: the unreadable key fails first, as a verdict.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, r := range c.Check(ctx) {
		if r.Reason != ReasonKeyMaterialError {
			t.Errorf("%s: %s %q, want KeyMaterialError", r.Target, r.Reason, r.Message)
		}
	}
}

// TestHungLibvirtdAtFirstDial: a checker with no pooled connection yet meets a frozen libvirtd:
// the channel to its socket opens (the kernel accepts for it) but the libvirt handshake gets no
// answer. That is a hung daemon, so the round reads Timeout (not LibvirtConnectFailed), the SSH
// link is kept, and once libvirtd runs again the next round is ready over that same link.
func TestHungLibvirtdAtFirstDial(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	c := newChecker(t, provider("kvm-hung-first", f, f.Hosts))
	h.PauseLibvirtd()
	paused := true
	defer func() {
		if paused {
			h.ResumeLibvirtd()
		}
	}()
	r := round(t, c)[h.Name]
	expect(t, r, checks.ReasonTimeout, "did not answer the connect handshake")
	st := viewPool(t, "kvm-hung-first", f.Hosts)
	if st.Dials["libvirt_connect"] != 1 || st.Links != 1 {
		t.Errorf("stats %+v, want one libvirt connect cut short over a kept link", st)
	}
	if n := h.TCPConnections(); n != 1 {
		t.Errorf("%d TCP connections, want 1", n)
	}
	h.ResumeLibvirtd()
	paused = false
	expectReady(t, h, round(t, c)[h.Name])
	if after := viewPool(t, "kvm-hung-first", f.Hosts); after.Handshakes != st.Handshakes {
		t.Errorf("SSH redialled after libvirtd resumed: %d -> %d handshakes", st.Handshakes, after.Handshakes)
	}
}

// TestSecretRotation, on a real host: the client key is rotated in place (the key file
// replaced, authorized_keys listing only the new key), as a Kubernetes Secret update does. The
// live link keeps working without a new login; once the link is cut, the next dial logs in with
// the new key, without a restart or a reload.
func TestSecretRotation(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	c := newChecker(t, provider("kvm-rotate", f, f.Hosts))
	expectReady(t, h, round(t, c)[h.Name])
	logins := h.Logins()
	if logins != 1 {
		t.Fatalf("%d logins after the first round, want 1", logins)
	}

	f.RotateClientKey()
	expectReady(t, h, round(t, c)[h.Name])
	if n := h.Logins(); n != logins {
		t.Errorf("%d logins after the rotation, want still %d: the live link keeps working", n, logins)
	}

	h.KillSSHConnections()
	// The link may be found dead during the round (the check retries once) or before it.
	expectReady(t, h, round(t, c)[h.Name])
	if n := h.Logins(); n != logins+1 {
		t.Errorf("%d logins after the link was cut, want %d", n, logins+1)
	}
	pubText, err := os.ReadFile(f.ClientKeyPath + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(pubText)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(h.Dir, "sshd.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Accepted publickey for root") || !strings.Contains(string(log), ssh.FingerprintSHA256(pub)) {
		t.Errorf("sshd never accepted the rotated key %s", ssh.FingerprintSHA256(pub))
	}
}

// fleetConfig is a test fleet as a block, with the loader's defaults.
func fleetConfig(b testenv.KVMBlock) Config {
	k := Config{User: b.User, PrivateKeyFile: b.PrivateKeyFile, KnownHostsFile: b.KnownHostsFile,
		Port: DefaultPort, Socket: b.Socket, StoragePool: b.StoragePool, Concurrency: DefaultConcurrency,
		TCPTimeout: DefaultTCPTimeout, SSHTimeout: DefaultSSHTimeout, LibvirtTimeout: DefaultLibvirtTimeout,
		RPCTimeout: DefaultRPCTimeout}
	for _, h := range b.Hosts {
		k.Hosts = append(k.Hosts, Host{Address: h.Address, Name: h.Name})
	}
	return k
}
