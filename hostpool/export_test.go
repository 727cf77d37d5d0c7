package hostpool

// HostKeyMismatch reports whether the host presented a key that known_hosts does not list for
// it (or one it lists as revoked): a reinstalled host, rotated keys, or an attack.
func (e *DialError) HostKeyMismatch() bool {
	return e.Stage == StageHostKey && !e.HostKeyUnknown()
}

// Addr is the host's address (host:port).
func (c *Conn) Addr() string { return c.addr }

// LinkID identifies the SSH connection underneath: two Conns with the same LinkID share one
// TCP connection.
func (c *Conn) LinkID() uint64 { return c.link.id }

// Done is closed when this libvirt connection has ended (the link died, libvirtd went away, or
// the pool closed); the next Acquire then returns a new one.
func (c *Conn) Done() <-chan struct{} { return c.ch.done }

// Stats is a snapshot of a pool's counters.
type Stats struct {
	// Links is the number of open SSH connections.
	Links int
	// Handshakes counts SSH connections established since New.
	Handshakes uint64
	// Dials counts connection attempts by result: "ok" or the Stage that failed.
	Dials map[string]uint64
	// AbandonedProbes is the number of probes abandoned at their deadline that have not returned.
	AbandonedProbes int
	// InUse is the number of Acquires not yet released.
	InUse int
	// Unresponsive is the number of hosts whose last dial ran out its bound or whose last
	// probe was abandoned.
	Unresponsive int
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	s := Stats{
		Links:           int(p.local.links.Load()),
		Handshakes:      p.local.handshakes.Load(),
		Dials:           p.local.dialCounts(),
		AbandonedProbes: int(p.local.abandoned.Load()),
		InUse:           int(p.local.inUse.Load()),
		Unresponsive:    int(p.local.unresponsive.Load()),
	}
	return s
}
