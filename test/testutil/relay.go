package testutil

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// Relay relays TCP connections from a loopback port to a target, to play a bad link between a
// client and a real server: Delay holds what the server sends that long (one-way latency, once
// a connection is a second old, its TLS handshake done); Freeze stops everything both ways while
// keeping every connection open (a hung server, a black-holed route).
type Relay struct {
	ln     net.Listener
	delay  time.Duration
	frozen atomic.Bool
}

// NewRelay starts a relay to target with delay (0: none); it stops with the test.
func NewRelay(tb testing.TB, target string, delay time.Duration) *Relay {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Relay{ln: ln, delay: delay}
	tb.Cleanup(func() { ln.Close() })
	go r.accept(target)
	return r
}

// Addr is the relay's address, host:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Freeze stops every byte, both ways, from now on.
func (r *Relay) Freeze() { r.frozen.Store(true) }

func (r *Relay) accept(target string) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		opened := time.Now()
		go r.pipe(s, c, opened, 0)
		go r.pipe(c, s, opened, r.delay)
	}
}

// pipe copies src to dst a chunk at a time, each delivered delay after it arrived (once the
// connection is a second old), none while frozen.
func (r *Relay) pipe(dst, src net.Conn, opened time.Time, delay time.Duration) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				at := time.Now()
				if at.Sub(opened) > time.Second {
					at = at.Add(delay)
				}
				q <- chunk{at, append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	for ch := range q {
		time.Sleep(time.Until(ch.at))
		for r.frozen.Load() {
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}
