package hostpool

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// channelMode is what the test server does with a direct-streamlocal channel.
type channelMode int

const (
	rejectChannel channelMode = iota // refuse it, as sshd does when the socket is absent
	closeChannel                     // accept it and close it at once (libvirt's handshake fails)
)

// sshServer is an in-process SSH server for the dial stages that need no libvirtd: host keys,
// authentication, channel refusal, keepalive replies. Tests that need libvirt use real hosts.
type sshServer struct {
	t        testing.TB
	ln       net.Listener
	Addr     string
	HostKeys []ssh.Signer
	cfg      *ssh.ServerConfig

	mode             atomic.Int32 // channelMode
	silentKeepalives atomic.Bool  // stop answering global requests
	accepted         atomic.Int64
	mu               sync.Mutex
	conns            []net.Conn
	wg               sync.WaitGroup
}

func newSigner(t testing.TB, typ string) ssh.Signer {
	t.Helper()
	var key any
	var err error
	switch typ {
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startServer starts a server with an ed25519 and an ECDSA host key that accepts only
// authorized for user "root".
func startServer(t testing.TB, authorized ssh.PublicKey) *sshServer {
	t.Helper()
	s := &sshServer{t: t}
	s.cfg = &ssh.ServerConfig{
		PublicKeyCallback: func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if c.User() == "root" && string(key.Marshal()) == string(authorized.Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	for _, typ := range []string{"ed25519", "ecdsa"} {
		k := newSigner(t, typ)
		s.HostKeys = append(s.HostKeys, k)
		s.cfg.AddHostKey(k)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln, s.Addr = ln, ln.Addr().String()
	s.wg.Go(s.serve)
	t.Cleanup(s.stop)
	return s
}

func (s *sshServer) stop() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *sshServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Go(func() { s.handle(c) })
	}
}

func (s *sshServer) handle(c net.Conn) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	s.wg.Go(func() {
		for r := range reqs {
			if s.silentKeepalives.Load() {
				continue // a peer that no longer answers: the client must give up on it
			}
			if r.WantReply {
				r.Reply(false, nil) // as OpenSSH answers keepalive@openssh.com
			}
		}
	})
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			nc.Reject(ssh.UnknownChannelType, "only streamlocal")
			continue
		}
		switch channelMode(s.mode.Load()) {
		case rejectChannel:
			nc.Reject(ssh.ConnectionFailed, "open failed")
		case closeChannel:
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(creqs)
			ch.Close()
		}
	}
}

// clientFiles writes a client key (optionally encrypted) and returns its path and public key.
func clientKey(t testing.TB, dir string, passphrase string) (string, ssh.PublicKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "test")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return path, signer.PublicKey()
}

// writeKnownHosts writes a known_hosts file listing keys for addr.
func writeKnownHosts(t testing.TB, dir, addr string, keys ...ssh.PublicKey) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, k) + "\n")
	}
	path := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
