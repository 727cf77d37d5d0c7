package kvmstandin

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// SetRTT gives the host a network round trip: every byte its SSH side sends (the SSH
// handshake's replies, and the libvirt replies carried in its channels) reaches the client rtt
// later, give or take up to jitter (uniformly), and in order, as over a link of that round-trip
// time. Writes are queued, not slept on, so that replies in flight overlap as on a network: a
// pipelined exchange costs one round trip, not one per reply. TCP's own handshake is answered
// by the kernel and not delayed, so a connect costs nothing and a new link one round trip less
// than over a real network. 0 turns the delay off for the bytes sent from then on.
func (h *Host) SetRTT(rtt, jitter time.Duration) {
	h.rtt.Store(int64(rtt))
	h.jitter.Store(int64(jitter))
}

// SetRTT gives every host of the fleet the same round trip and jitter (Host.SetRTT).
func (f *Fleet) SetRTT(rtt, jitter time.Duration) {
	for _, h := range f.Hosts {
		h.SetRTT(rtt, jitter)
	}
}

// delay is the one-way delay of the next write: the round trip, jittered.
func (h *Host) delay() time.Duration {
	d := time.Duration(h.rtt.Load())
	if j := time.Duration(h.jitter.Load()); j > 0 && d > 0 {
		d += time.Duration(rand.Int64N(int64(2*j+1))) - j
	}
	return max(d, 0)
}

// delayedConn delivers what the server writes after its host's delay, in order: a write is
// queued with its delivery time and returns at once; one goroutine per connection, started
// when the queue fills and gone when it empties, writes each chunk at its time.
type delayedConn struct {
	net.Conn
	h *Host

	mu      sync.Mutex
	queue   []delayedWrite
	last    time.Time // the latest delivery time queued: later writes never overtake it
	running bool
	err     error
}

type delayedWrite struct {
	at time.Time
	b  []byte
}

func (c *delayedConn) Write(p []byte) (int, error) {
	d := c.h.delay()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if d == 0 && !c.running {
		return c.Conn.Write(p)
	}
	at := time.Now().Add(d)
	if at.Before(c.last) {
		at = c.last
	}
	c.last = at
	c.queue = append(c.queue, delayedWrite{at: at, b: append([]byte(nil), p...)})
	if !c.running {
		c.running = true
		go c.deliver()
	}
	return len(p), nil
}

func (c *delayedConn) deliver() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.err != nil {
			c.running = false
			c.queue = nil
			c.mu.Unlock()
			return
		}
		w := c.queue[0]
		c.queue = c.queue[1:]
		c.mu.Unlock()
		time.Sleep(time.Until(w.at))
		if _, err := c.Conn.Write(w.b); err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
		}
	}
}
