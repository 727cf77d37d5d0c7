package kvmhost

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestConfigureSSHD: directives given to ConfigureSSHD win over the host's own (publickey turned
// off, a client with only a key cannot log in), and none restores the host's configuration.
func TestConfigureSSHD(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	h.ConfigureSSHD("PubkeyAuthentication no")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h))
	if err == nil || !strings.Contains(err.Error(), "unable to authenticate") || strings.Contains(err.Error(), "publickey") {
		t.Fatalf("login with publickey turned off: %v, want authentication refused after the none method only", err)
	}
	h.ConfigureSSHD()
	mustSSH(t, f, h)
}

// TestServeHostKeyTypes: a host serving only its RSA key offers only RSA algorithms; a client
// offering only ed25519 fails in algorithm negotiation, one offering RSA logs in.
func TestServeHostKeyTypes(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	h.ServeHostKeyTypes("rsa")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h, ssh.KeyAlgoED25519))
	var ane *ssh.AlgorithmNegotiationError
	if !errors.As(err, &ane) || ane.What != "host key" || slices.Contains(ane.RequestedAlgorithms, ssh.KeyAlgoED25519) ||
		!slices.Contains(ane.RequestedAlgorithms, ssh.KeyAlgoRSASHA256) {
		t.Fatalf("ed25519-only client against an RSA-only host: %v, want a host key negotiation failure listing RSA only", err)
	}
	c, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h, ssh.KeyAlgoRSASHA256))
	if err != nil {
		t.Fatalf("RSA client against an RSA-only host: %v", err)
	}
	c.Close()
	h.ServeHostKeyTypes()
	if _, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h, ssh.KeyAlgoED25519)); err != nil {
		t.Fatalf("ed25519 client once every type is served again: %v", err)
	}
}

// TestDelayUserauth: the handshake and the host key come at once; the answer to the first
// authentication request comes only after the delay, which the host's name lookup takes.
func TestDelayUserauth(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	const delay = 1500 * time.Millisecond
	h.DelayUserauth(delay)
	cfg := clientConfig(t, f, h)
	var hostKeyAt, keyOfferedAt time.Time
	verify := cfg.HostKeyCallback
	cfg.HostKeyCallback = func(name string, remote net.Addr, key ssh.PublicKey) error {
		hostKeyAt = time.Now()
		return verify(name, remote, key)
	}
	keyPEM, err := os.ReadFile(f.ClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// x/crypto sends the none request first and offers the key once the host answered it.
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeysCallback(func() ([]ssh.Signer, error) {
		keyOfferedAt = time.Now()
		return []ssh.Signer{signer}, nil
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	c, err := dialSSH(ctx, h.Addr, cfg)
	if err != nil {
		t.Fatalf("login on a host slow at authentication: %v", err)
	}
	c.Close()
	if d := hostKeyAt.Sub(start); hostKeyAt.IsZero() || d > delay/2 {
		t.Errorf("host key after %s, want it at once", d)
	}
	if d := keyOfferedAt.Sub(hostKeyAt); d < delay-100*time.Millisecond {
		t.Errorf("the none request was answered %s after the host key, want at least the delay %s", d, delay)
	}
	if n := h.NameLookups(); n < 1 {
		t.Errorf("%d name lookups, want the client's name looked up", n)
	}
	h.DelayUserauth(0)
	start = time.Now()
	mustSSH(t, f, h)
	if d := time.Since(start); d > delay/2 {
		t.Errorf("login took %s with the delay removed", d)
	}
}

// TestKillSSHConnectionsUnnoticed: the client is not told that its connection was killed; the
// first thing it sends is answered with a reset, which ends its connection.
func TestKillSSHConnectionsUnnoticed(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	c := mustSSH(t, f, h)
	ended := make(chan error, 1)
	go func() { ended <- c.Wait() }()
	h.KillSSHConnectionsUnnoticed()
	if n := h.TCPConnections(); n != 0 {
		t.Fatalf("the host still has %d established connections", n)
	}
	select {
	case err := <-ended:
		t.Fatalf("the client noticed the end of its connection (%v) before sending anything", err)
	case <-time.After(time.Second):
	}
	if _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err == nil {
		t.Error("a request on the killed connection got an answer")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not learn of the end when it sent on the connection")
	}
	mustSSH(t, f, h) // new connections are not affected
}

func TestParseHexAddr(t *testing.T) {
	got, err := parseHexAddr("0100007F:0016")
	if want := netip.MustParseAddrPort("127.0.0.1:22"); err != nil || got != want {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if _, err := parseHexAddr("0100007F"); err == nil {
		t.Error("an address without a port parsed")
	}
}
