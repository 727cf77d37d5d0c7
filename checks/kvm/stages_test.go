package kvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// TestReasonNamesTheStage runs the check against a real host whose faults used to be blamed on
// the wrong stage of the dial: each reads the reason of the stage that failed. The subtests run
// in order on one host, each leaving it as it found it.
func TestReasonNamesTheStage(t *testing.T) {
	f := kvmhost.Start(t, 1)
	h := f.Hosts[0]
	hosts := []*kvmhost.Host{h}

	t.Run("authentication", func(t *testing.T) {
		c := newChecker(t, provider("stages-auth", f, hosts))
		expectReady(t, h, round(t, c)[h.Name])

		// Refused after the "none" request, before any key is offered.
		h.ConfigureSSHD("PubkeyAuthentication no")
		h.KillSSHConnections()
		expect(t, round(t, c)[h.Name], ReasonSSHAuthFailed, "ssh authentication: ")

		// The answer to the "none" request comes after the authentication's bound (1s here).
		h.ConfigureSSHD()
		h.DelayUserauth(3 * time.Second)
		defer h.DelayUserauth(0)
		expect(t, round(t, c)[h.Name], ReasonSSHAuthFailed, "ssh authentication: no answer within the stage's bound")

		h.DelayUserauth(0)
		expectReady(t, h, round(t, c)[h.Name])
	})

	t.Run("host key types", func(t *testing.T) {
		// known_hosts holds only the host's ed25519 key; the host then serves only its RSA key.
		p := provider("stages-host-key", f, hosts)
		kh := filepath.Join(t.TempDir(), "known_hosts")
		writeLines(t, kh, knownhosts.Line([]string{knownhosts.Normalize(h.Addr)}, h.HostKeys[0]))
		p.Block.(*Config).KnownHostsFile = kh
		c := newChecker(t, p)
		expectReady(t, h, round(t, c)[h.Name])

		h.ServeHostKeyTypes("rsa")
		defer h.ServeHostKeyTypes()
		h.KillSSHConnections()
		got := round(t, c)[h.Name]
		expect(t, got, ReasonHostKeyMismatch, "the host offers host key types "+ssh.KeyAlgoRSASHA512)
		expect(t, got, ReasonHostKeyMismatch, "known_hosts holds only "+ssh.KeyAlgoED25519+" for it")
	})

	t.Run("dead link", func(t *testing.T) {
		// No keepalive during the test: only the check can find the link dead.
		c, err := newTuned(provider("stages-dead-link", f, hosts), nil, tuning{
			KeepaliveInterval: time.Hour, DisconnectTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// The pool keeps its SSH link and no libvirt connection: libvirtd was down at the last
		// check (a refused channel on a live link is the libvirt socket's failure).
		socketRefused := func() {
			t.Helper()
			expectReady(t, h, round(t, c)[h.Name])
			h.StopLibvirtd()
			expect(t, round(t, c)[h.Name], ReasonLibvirtSocketUnreachable, "opening the libvirt socket")
			h.StartLibvirtd()
		}

		socketRefused()
		h.KillSSHConnectionsUnnoticed()
		expectReady(t, h, round(t, c)[h.Name])

		socketRefused()
		h.StopSSHD()
		defer h.StartSSHD()
		h.KillSSHConnectionsUnnoticed()
		expect(t, round(t, c)[h.Name], ReasonTCPUnreachable, "connection refused")
	})
}

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
