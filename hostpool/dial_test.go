package hostpool

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// packet is a libvirt RPC frame of n bytes in all (its length word included).
func packet(n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b, uint32(n))
	return b
}

// TestFrameCounter: packets are counted however the stream is cut.
func TestFrameCounter(t *testing.T) {
	var stream []byte
	for _, n := range []int{28, 40, 4, 1000} {
		stream = append(stream, packet(n)...)
	}
	for _, chunk := range []int{1, 3, 7, 28, len(stream)} {
		var f frameCounter
		for b := stream; len(b) > 0; {
			k := min(chunk, len(b))
			f.feed(b[:k])
			b = b[k:]
		}
		if f.packets != 4 || f.rest != 0 || f.hdrLen != 0 {
			t.Errorf("chunks of %d: %+v, want 4 complete packets", chunk, f)
		}
	}
	var f frameCounter
	if f.feed(stream[:30]) != true || f.packets != 1 || f.feed(stream[30:60]) || f.packets != 1 {
		t.Errorf("partial feeds: %+v, want exactly the first packet complete", f)
	}
}

// pipeConn returns a watchedConn over one end of a pipe and the other end, as the peer.
func pipeConn(t *testing.T) (*watchedConn, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return newWatchedConn(a), b
}

// readErr starts a read on c and returns where its error arrives.
func readErr(c *watchedConn) <-chan error {
	out := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := c.Read(buf); err != nil {
				out <- err
				return
			}
		}
	}()
	return out
}

func expectHeld(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		t.Fatalf("%s: the read error (%v) was not held back", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

func expectReleased(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("%s: read error %v, want EOF", what, err)
		}
	case <-time.After(holdReadErrorLimit / 2):
		t.Fatalf("%s: the read error is still held back", what)
	}
}

// TestWatchedConnOrdersHandshake: a read error during the libvirt handshake is held back until
// the handshake is over, unless a request awaits its reply or go-libvirt closes the connection.
func TestWatchedConnOrdersHandshake(t *testing.T) {
	t.Run("no request outstanding: held until handshakeDone", func(t *testing.T) {
		c, peer := pipeConn(t)
		go func() {
			req := make([]byte, 28)
			io.ReadFull(peer, req)
			peer.Write(packet(28)) // the reply
			peer.Close()
		}()
		errs := readErr(c)
		if _, err := c.Write(packet(28)); err != nil {
			t.Fatal(err)
		}
		expectHeld(t, errs, "after the last reply")
		select {
		case <-c.done:
			t.Fatal("done closed while the read error is held back")
		default:
		}
		c.handshakeDone()
		expectReleased(t, errs, "after handshakeDone")
		<-c.done
	})
	t.Run("request outstanding: at once", func(t *testing.T) {
		c, peer := pipeConn(t)
		go func() {
			io.ReadFull(peer, make([]byte, 28))
			peer.Close() // no reply
		}()
		errs := readErr(c)
		if _, err := c.Write(packet(28)); err != nil {
			t.Fatal(err)
		}
		expectReleased(t, errs, "with a request awaiting its reply")
	})
	t.Run("request written while held: released", func(t *testing.T) {
		// TCP, for a half close: the peer ends its side (the read error) and still reads.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			p, err := ln.Accept()
			if err == nil {
				accepted <- p
			}
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		peer := <-accepted
		defer peer.Close()
		c := newWatchedConn(raw)
		defer c.Close()
		errs := readErr(c)
		peer.(*net.TCPConn).CloseWrite()
		expectHeld(t, errs, "with no request outstanding")
		if _, err := c.Write(packet(28)); err != nil {
			t.Fatal(err)
		}
		expectReleased(t, errs, "once a request awaits its reply")
	})
	t.Run("closed by go-libvirt: released", func(t *testing.T) {
		c, peer := pipeConn(t)
		errs := readErr(c)
		peer.Close()
		expectHeld(t, errs, "before close")
		c.Close()
		expectReleased(t, errs, "after Close")
	})
	t.Run("aborted by the dialer: still held", func(t *testing.T) {
		c, _ := pipeConn(t)
		errs := readErr(c)
		c.abort()
		select {
		case <-c.done:
		default:
			t.Fatal("abort did not close done")
		}
		expectHeld(t, errs, "after abort")
		c.handshakeDone()
		select {
		case err := <-errs:
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("read error %v", err)
			}
		case <-time.After(time.Second):
			t.Fatal("still held after handshakeDone")
		}
	})
	t.Run("after the handshake: at once", func(t *testing.T) {
		c, peer := pipeConn(t)
		c.handshakeDone()
		errs := readErr(c)
		peer.Close()
		expectReleased(t, errs, "after the handshake")
	})
}

// TestHostKeyAlgorithmsWithoutLookup: the algorithms come from known_hosts' entry for the dialled
// name, with the address the connection reached: no lookup of the name (which would not obey the
// dial's context) is made, so a name no resolver knows still gets them, and a name known_hosts
// does not list gets none (the handshake's verification then fails it, as before).
func TestHostKeyAlgorithmsWithoutLookup(t *testing.T) {
	ed := newSigner(t, "ed25519").PublicKey()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaPub, err := ssh.NewPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	const name = "kvm-7.lab.invalid:2222" // .invalid never resolves
	kh := writeKnownHosts(t, t.TempDir(), name, rsaPub, ed)
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.IPv4(198, 18, 0, 9), Port: 2222}
	got := hostKeyAlgorithms(cb, name, remote)
	want := []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoED25519}
	if !slices.Equal(got, want) {
		t.Errorf("algorithms for %s: %v, want %v", name, got, want)
	}
	if got := hostKeyAlgorithms(cb, "kvm-8.lab.invalid:2222", remote); got != nil {
		t.Errorf("algorithms for a host known_hosts does not list: %v, want none", got)
	}
}
