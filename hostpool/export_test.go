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
