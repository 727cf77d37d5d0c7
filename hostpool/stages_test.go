package hostpool

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// The tests in this file run against real hosts (sshd + libvirtd in network namespaces) and check
// that a failed dial names the stage that failed.

// stagePool is a pool for f's hosts whose keepalive never runs during a test, so that only the
// dial under test can notice a dead link.
func stagePool(t *testing.T, f *kvmhost.Fleet, knownHosts string, sshTimeout time.Duration) *Pool {
	t.Helper()
	p := New(Options{
		Name:              "t-stages",
		User:              f.User,
		PrivateKeyFile:    f.ClientKeyPath,
		KnownHostsFile:    knownHosts,
		Socket:            f.Hosts[0].Socket,
		SSHTimeout:        sshTimeout,
		KeepaliveInterval: time.Hour,
		DisconnectTimeout: time.Second,
	})
	t.Cleanup(func() { p.Close() })
	return p
}

func acquire(p *Pool, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, release, err := p.Acquire(ctx, addr)
	if err == nil {
		release()
	}
	return err
}

// TestAuthStageStartsAtHostKey: once the host key is accepted, every failure of the dial is
// authentication's. A host with publickey turned off fails after x/crypto's "none" request,
// before any key is offered; a host slow at answering that request (its name lookup) runs out
// the authentication stage's own bound. Both are StageSSHAuth, not the handshake's.
func TestAuthStageStartsAtHostKey(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	for _, tc := range []struct {
		name       string
		directives []string
	}{
		{"publickey off", []string{"PubkeyAuthentication no"}},
		{"password only", []string{"PasswordAuthentication yes", "AuthenticationMethods password"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.ConfigureSSHD(tc.directives...)
			err := acquire(stagePool(t, f, f.KnownHostsPath, 0), h.Addr)
			de := stageOf(t, err)
			if de.Stage != StageSSHAuth || de.Timeout() || !strings.Contains(err.Error(), "unable to authenticate") {
				t.Errorf("got %v (stage %s), want the ssh_auth stage refused", err, de.Stage)
			}
		})
	}
	t.Run("slow at userauth", func(t *testing.T) {
		const bound = time.Second
		h.ConfigureSSHD()
		h.DelayUserauth(3 * bound)
		defer h.DelayUserauth(0)
		p := stagePool(t, f, f.KnownHostsPath, bound)
		start := time.Now()
		err := acquire(p, h.Addr)
		took := time.Since(start)
		de := stageOf(t, err)
		if de.Stage != StageSSHAuth || !de.BoundExpired() {
			t.Errorf("got %v (stage %s, aborted %v), want the ssh_auth stage's bound expired", err, de.Stage, de.Aborted)
		}
		if took > 2*bound {
			t.Errorf("the dial took %s, want about the handshake plus the authentication bound %s", took, bound)
		}
		if h.NameLookups() == 0 {
			t.Error("the host did not look the client's name up: authentication was not the slow part")
		}
		// A stage that ran out its bound marks the host unresponsive; the next acquire dials
		// again and fails at the same stage.
		if st := p.State(h.Addr); st != HostUnresponsive {
			t.Errorf("state after the slow authentication: %v, want HostUnresponsive", st)
		}
		lookups := h.NameLookups()
		if err := acquire(p, h.Addr); stageOf(t, err).Stage != StageSSHAuth || h.NameLookups() == lookups {
			t.Errorf("next acquire: %v, want a new dial failing at ssh_auth again", err)
		}
	})
}

// TestNoKnownHostKeyTypeIsAMismatch: known_hosts holds only the host's ed25519 key; the host then
// serves only an RSA (or ECDSA) key, as a reinstalled host or an impostor would. The handshake
// offers only ed25519 and fails in algorithm negotiation, before any host key is shown: that is a
// host key mismatch, and the message says which types each side has.
func TestNoKnownHostKeyTypeIsAMismatch(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	ed := h.HostKeys[0]
	if ed.Type() != ssh.KeyAlgoED25519 {
		t.Fatalf("first host key is %s, want ed25519", ed.Type())
	}
	kh := writeKnownHosts(t, t.TempDir(), h.Addr, ed)
	for _, tc := range []struct{ serve, offered string }{
		{"rsa", ssh.KeyAlgoRSASHA256},
		{"ecdsa", ssh.KeyAlgoECDSA256},
	} {
		t.Run(tc.serve, func(t *testing.T) {
			h.ServeHostKeyTypes()
			p := stagePool(t, f, kh, 0)
			if err := acquire(p, h.Addr); err != nil {
				t.Fatalf("host serving its ed25519 key: %v", err)
			}
			h.ServeHostKeyTypes(tc.serve)
			h.KillSSHConnections()
			testutil.Eventually(t, 10*time.Second, "the link to close", func() bool { return p.Stats().Links == 0 })
			err := acquire(p, h.Addr)
			de := stageOf(t, err)
			var ane *ssh.AlgorithmNegotiationError
			if de.Stage != StageHostKey || !de.HostKeyMismatch() || de.Timeout() || !errors.As(err, &ane) {
				t.Fatalf("got %v (stage %s), want a host key mismatch wrapping the negotiation error", err, de.Stage)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.offered) || !strings.Contains(msg, ssh.KeyAlgoED25519) {
				t.Errorf("message %q does not name the host's key types (%s) and known_hosts' (%s)", msg, tc.offered, ssh.KeyAlgoED25519)
			}
		})
	}
	h.ServeHostKeyTypes()
}

// TestDeadLinkIsRedialled: the libvirt channel is opened on a pooled SSH link that has died
// without the pool noticing (the host's sshd connection killed, its end never reaching the
// client). The open fails because the link is dead, not because of libvirt: the pool drops the
// link and dials again within the same Acquire, and reports that dial. A channel refused on a
// live link (libvirtd stopped) stays a libvirt socket failure, without a new handshake.
func TestDeadLinkIsRedialled(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	p := stagePool(t, f, f.KnownHostsPath, 0)

	// socketRefused leaves the pool with its link and no libvirt connection: libvirtd stops
	// (ending the libvirt connection), the channel to its socket is refused, libvirtd starts.
	socketRefused := func(t *testing.T) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, release, err := p.Acquire(ctx, h.Addr)
		if err != nil {
			t.Fatal(err)
		}
		release()
		before := p.Stats()
		h.StopLibvirtd()
		<-c.Done()
		err = acquire(p, h.Addr)
		var oce *ssh.OpenChannelError
		if de := stageOf(t, err); de.Stage != StageLibvirtSocket || !errors.As(err, &oce) {
			t.Fatalf("libvirtd stopped: %v, want the libvirt socket refused", err)
		}
		if st := p.Stats(); st.Handshakes != before.Handshakes || st.Links != 1 {
			t.Fatalf("a channel refused on a live link: %+v, want the link kept and no new handshake (was %+v)", st, before)
		}
		h.StartLibvirtd()
	}
	// killUnnoticed kills the link so that the pool does not know.
	killUnnoticed := func(t *testing.T) {
		t.Helper()
		h.KillSSHConnectionsUnnoticed()
		time.Sleep(500 * time.Millisecond)
		if n := p.Stats().Links; n != 1 {
			t.Fatalf("%d links after the unnoticed kill, want the dead link still counted as open", n)
		}
	}

	t.Run("sshd up", func(t *testing.T) {
		socketRefused(t)
		killUnnoticed(t)
		before := p.Stats()
		if err := acquire(p, h.Addr); err != nil {
			t.Fatalf("acquire on a dead link with the host up: %v, want a new connection", err)
		}
		st := p.Stats()
		if st.Handshakes != before.Handshakes+1 || st.Dials["ok"] != before.Dials["ok"]+1 ||
			st.Dials[string(StageLibvirtSocket)] != before.Dials[string(StageLibvirtSocket)] {
			t.Errorf("stats %+v (before %+v): want one new handshake and one ok dial, no libvirt socket failure", st, before)
		}
	})
	t.Run("sshd stopped", func(t *testing.T) {
		socketRefused(t)
		h.StopSSHD()
		defer h.StartSSHD()
		killUnnoticed(t)
		err := acquire(p, h.Addr)
		if de := stageOf(t, err); de.Stage != StageTCP || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("acquire on a dead link with sshd stopped: %v (stage %s), want the new dial's tcp stage refused", err, de.Stage)
		}
	})
}
