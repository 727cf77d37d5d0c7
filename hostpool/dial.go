package hostpool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// Stage is the step of a dial that failed. Its value is the `result` label of the dials metric.
type Stage string

// The stages of a dial, in the order a dial goes through them.
const (
	// StageKeyMaterial: the private key, its passphrase file or the known_hosts file could not be
	// read or used. Nothing was sent on the network.
	StageKeyMaterial Stage = "key_material"
	// StageTCP: the TCP connection to the host's SSH port failed.
	StageTCP Stage = "tcp"
	// StageSSHHandshake: TCP connected, but the SSH protocol handshake failed before the host
	// key was accepted.
	StageSSHHandshake Stage = "ssh_handshake"
	// StageHostKey: the host's key is not in known_hosts (unknown) or differs from it
	// (mismatch), or the host offers none of the key types known_hosts holds for it (a mismatch
	// too, found in the algorithm negotiation).
	StageHostKey Stage = "host_key"
	// StageSSHAuth: anything after the host key was accepted: the host refused the client's key
	// for the user, offers no method the client has (publickey turned off), or did not finish.
	StageSSHAuth Stage = "ssh_auth"
	// StageLibvirtSocket: SSH works, but the channel to the libvirt socket was refused (a channel
	// that failed because the link was dead is redialled, never this stage).
	StageLibvirtSocket Stage = "libvirt_socket"
	// StageLibvirtConnect: the channel opened, but libvirt's connection handshake failed.
	StageLibvirtConnect Stage = "libvirt_connect"
)

// Stages lists every stage in dial order.
var Stages = []Stage{StageKeyMaterial, StageTCP, StageSSHHandshake, StageHostKey, StageSSHAuth,
	StageLibvirtSocket, StageLibvirtConnect}

// resultOK is the dials metric's result for a dial that produced a usable connection.
const resultOK = "ok"

func (s Stage) describe() string {
	switch s {
	case StageKeyMaterial:
		return "key material"
	case StageTCP:
		return "tcp connect"
	case StageSSHHandshake:
		return "ssh handshake"
	case StageHostKey:
		return "host key verification"
	case StageSSHAuth:
		return "ssh authentication"
	case StageLibvirtSocket:
		return "opening the libvirt socket"
	case StageLibvirtConnect:
		return "libvirt connect"
	}
	return string(s)
}

// DialError is a failed dial: the stage that failed, the host, and the cause it unwraps to
// (a *knownhosts.KeyError, a *ssh.OpenChannelError, a *net.OpError, context.DeadlineExceeded...).
type DialError struct {
	// Stage is the stage that failed, or the one in progress when the dial was cut short.
	Stage Stage
	Addr  string
	Err   error
	// Aborted: the caller's context ended (or the pool closed) before the stage completed or
	// failed on its own. The host is not to blame; Stage only says how far the dial got.
	Aborted bool
}

func (e *DialError) Error() string {
	return fmt.Sprintf("dial %s: %s: %v", e.Addr, e.Stage.describe(), e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// Timeout reports whether the stage ended without an answer: its own bound expired
// (BoundExpired) or the dial was cut short (Aborted), rather than the host answering with an
// error.
func (e *DialError) Timeout() bool {
	if e.Aborted {
		return true
	}
	var ne net.Error
	return errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) ||
		errors.Is(e.Err, ErrClosed) || errors.As(e.Err, &ne) && ne.Timeout()
}

// BoundExpired reports whether the stage's own bound (TCPTimeout, SSHTimeout, LibvirtTimeout)
// expired: the host did not answer that stage in time.
func (e *DialError) BoundExpired() bool { return !e.Aborted && e.Timeout() }

// HostKeyUnknown reports whether the host is not listed in known_hosts at all.
func (e *DialError) HostKeyUnknown() bool {
	var ke *knownhosts.KeyError
	return e.Stage == StageHostKey && errors.As(e.Err, &ke) && len(ke.Want) == 0
}

// keepaliveRequest is OpenSSH's keepalive global request. Any reply (OpenSSH answers it with
// failure) proves the peer is alive.
const keepaliveRequest = "keepalive@openssh.com"

// loadSigner reads the private key, decrypting it with the passphrase file when one is set. An
// encrypted key without a passphrase file is an error, never a silent fallback.
func loadSigner(keyFile, passphraseFile string) (ssh.Signer, error) {
	if keyFile == "" {
		return nil, errors.New("no private key file configured")
	}
	pem, err := fileread.Read(keyFile, fileread.CredentialLimit)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	if passphraseFile == "" {
		s, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			var missing *ssh.PassphraseMissingError
			if errors.As(err, &missing) {
				return nil, fmt.Errorf("private key %s is encrypted and no passphraseFile is configured: %w", keyFile, err)
			}
			return nil, fmt.Errorf("parse private key %s: %w", keyFile, err)
		}
		return s, nil
	}
	pass, err := fileread.Read(passphraseFile, fileread.CredentialLimit)
	if err != nil {
		return nil, fmt.Errorf("read passphrase file: %w", err)
	}
	// Files written by editors and `echo` end with a newline that is not part of the passphrase.
	pass = []byte(strings.TrimRight(string(pass), "\r\n"))
	s, err := ssh.ParsePrivateKeyWithPassphrase(pem, pass)
	if err != nil {
		// A passphrase file next to a key that is not encrypted is harmless: use the key.
		if plain, plainErr := ssh.ParsePrivateKey(pem); plainErr == nil {
			return plain, nil
		}
		return nil, fmt.Errorf("decrypt private key %s with the passphrase file: %w", keyFile, err)
	}
	return s, nil
}

// hostKeyAlgorithms lists the host key algorithms cb has keys for at addr, so that the handshake
// negotiates a key type known_hosts can verify: x/crypto prefers ECDSA, then RSA, then Ed25519,
// and a host with several key types whose known_hosts entry holds only one would otherwise fail
// with a mismatch. It probes cb with a key nobody has; the mismatch error lists the keys it
// wanted. The pool caches the answer per address and known_hosts version (Pool.algorithms). nil means "no opinion": use x/crypto's defaults (the callback then decides).
//
// remote is the address the TCP connection reached, the one the handshake passes to cb too, so
// the probe needs no lookup of its own (knownhosts matches on addr, the dialled name, and only
// falls back to remote's address when addr is empty). The list only chooses which of its keys the
// host shows; the handshake still verifies that key with cb, so verification is as strict.
func hostKeyAlgorithms(cb ssh.HostKeyCallback, addr string, remote net.Addr) []string {
	var keyErr *knownhosts.KeyError
	if err := cb(addr, remote, probeKey()); !errors.As(err, &keyErr) || len(keyErr.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, w := range keyErr.Want {
		names := []string{w.Key.Type()}
		switch w.Key.Type() {
		case ssh.KeyAlgoRSA:
			// An RSA key signs with SHA-2 for current servers; SHA-1 "ssh-rsa" is refused by them.
			names = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				algos = append(algos, n)
			}
		}
	}
	return algos
}

// stage runs one bounded stage of a dial: its context ends with the caller's (the round's
// deadline, Close) or when the stage's own bound expires, whichever comes first.
type stage struct {
	name   Stage
	bound  time.Duration
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
}

func newStage(parent context.Context, name Stage, bound time.Duration) *stage {
	ctx, cancel := context.WithTimeoutCause(parent, bound, errBoundExpired)
	return &stage{name: name, bound: bound, parent: parent, ctx: ctx, cancel: cancel}
}

// errBoundExpired is the cause of a stage context whose own bound expired.
var errBoundExpired = errors.New("stage bound expired")

// fail tags err with the stage and with why the stage ended: the caller's context ended first
// (Aborted: the host is not to blame), the stage's bound expired (the host did not answer in
// time), or the host answered with an error. When both contexts ended, the caller's wins: a
// dial cut by the round's deadline never blames the host.
func (s *stage) fail(addr string, err error) *DialError {
	de := &DialError{Stage: s.name, Addr: addr, Err: err}
	// The net package turns a context's deadline into the socket's own, and may report the
	// resulting i/o timeout a moment before the context reports its end: such a timeout is the
	// earlier of the two deadlines'.
	var ne net.Error
	deadlineHit := errors.As(err, &ne) && ne.Timeout()
	parentDeadline, parentHas := s.parent.Deadline()
	stageDeadline, _ := s.ctx.Deadline()
	parentFirst := parentHas && !parentDeadline.After(stageDeadline)
	switch {
	case s.parent.Err() != nil, deadlineHit && parentFirst && !time.Now().Before(parentDeadline):
		de.Aborted = true
		cause := context.Cause(s.parent)
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		de.Err = fmt.Errorf("cut short when the caller gave up (%w)", cause)
	case errors.Is(context.Cause(s.ctx), errBoundExpired), deadlineHit && !time.Now().Before(stageDeadline):
		de.Err = fmt.Errorf("no answer within the stage's bound of %v: %w", s.bound, context.DeadlineExceeded)
	}
	return de
}

// dialLink opens an SSH connection to addr: TCP (bounded by TCPTimeout), then the handshake up
// to the host key's acceptance (bounded by SSHTimeout), then the rest, authentication (bounded by
// SSHTimeout again, from the moment the host key callback accepted the key), each also bounded
// by ctx (x/crypto's own timeout covers only the TCP connect).
func (p *Pool) dialLink(ctx context.Context, addr string, tr Tracer) (*link, error) {
	trace := &stageTrace{tr: tr}
	trace.next(StageKeyMaterial, "")
	signer, err := p.signer()
	if err != nil {
		de := &DialError{Stage: StageKeyMaterial, Addr: addr, Err: err}
		trace.finish(de.Error())
		return nil, de
	}
	cb, err := p.hostKeyCallback(addr)
	if err != nil {
		de := &DialError{Stage: StageKeyMaterial, Addr: addr, Err: err}
		trace.finish(de.Error())
		return nil, de
	}

	trace.next(StageTCP, "ok: private key and known_hosts usable")
	st := newStage(ctx, StageTCP, p.opts.TCPTimeout)
	var d net.Dialer
	tcp, err := d.DialContext(st.ctx, "tcp", addr)
	st.cancel()
	if err != nil {
		de := st.fail(addr, err)
		trace.finish(de.Error())
		return nil, de
	}
	trace.next(StageSSHHandshake, "ok: connected to "+tcp.RemoteAddr().String())
	hs := &handshake{ctx: ctx, tcp: tcp, authBound: p.opts.SSHTimeout}
	cfg := &ssh.ClientConfig{
		User: p.opts.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			trace.next(StageHostKey, "ok: key exchange done, host key "+key.Type()+" offered")
			err := cb(hostname, remote, key)
			hs.hostKeyChecked(err)
			if err == nil {
				trace.next(StageSSHAuth, "ok: host key "+ssh.FingerprintSHA256(key)+" matches known_hosts")
			}
			return err
		},
		ClientVersion: "SSH-2.0-provider-health-exporter",
	}
	if !p.opts.InsecureSkipHostKeyVerification {
		// After the connect, with the address it reached: no lookup outside ctx.
		cfg.HostKeyAlgorithms = p.algorithms(cb, addr, tcp.RemoteAddr())
	}
	hs.start(newStage(ctx, StageSSHHandshake, p.opts.SSHTimeout))
	conn, chans, reqs, err := ssh.NewClientConn(tcp, addr, cfg)
	st, hostKeyErr, cut := hs.end()
	defer st.cancel()
	if cut && err == nil {
		// ctx ended just as the handshake completed: the connection is already closed.
		conn.Close()
		err = st.ctx.Err()
	}
	if err != nil {
		tcp.Close()
		var ane *ssh.AlgorithmNegotiationError
		switch {
		case hostKeyErr != nil:
			st.name, err = StageHostKey, hostKeyErr
		case st.name == StageSSHHandshake && cfg.HostKeyAlgorithms != nil && errors.As(err, &ane) && ane.What == "host key":
			// The host offers none of the key types known_hosts holds for it: it cannot prove
			// it is the host known_hosts knows, as surely as a key that differs.
			st.name, err = StageHostKey, &hostKeyTypesError{offered: ane.RequestedAlgorithms, known: cfg.HostKeyAlgorithms, err: err}
		}
		de := st.fail(addr, err)
		trace.finish(de.Error())
		return nil, de
	}
	trace.finish("ok: authenticated as " + p.opts.User)
	p.countHandshake()
	l := &link{
		id:              linkSeq.Add(1),
		addr:            addr,
		conn:            conn,
		done:            make(chan struct{}),
		channelRequests: make(chan (<-chan *ssh.Request), 1),
		reqs:            reqs,
		chans:           chans,
	}
	return l, nil
}

// stageTrace reports the stages of one dial to a Tracer: next ends the stage in progress with
// its result and begins the next one; finish ends the last. Everything is a no-op without a
// Tracer. The host key callback runs on x/crypto's key exchange goroutine, hence the lock; a
// later key exchange (a rekey) after finish records nothing.
type stageTrace struct {
	tr   Tracer
	mu   sync.Mutex
	end  func(string)
	done bool
}

func (t *stageTrace) next(stage Stage, prevResult string) {
	if t.tr == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	if t.end != nil {
		t.end(prevResult)
	}
	t.end = t.tr.Begin(stage.describe())
}

func (t *stageTrace) finish(result string) {
	if t.tr == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if t.end != nil {
		t.end(result)
	}
}

// handshake is the stage in progress while ssh.NewClientConn runs: StageSSHHandshake until the
// host key callback accepts the key, then StageSSHAuth with a bound of its own, so that a slow
// handshake is never blamed on authentication nor a slow or refusing authentication (a user or
// name lookup, publickey turned off) on the handshake. x/crypto calls the host key callback on
// its key exchange goroutine, hence the lock.
type handshake struct {
	ctx       context.Context
	tcp       net.Conn
	authBound time.Duration

	mu   sync.Mutex
	st   *stage
	stop func() bool // disarms the closing of tcp when st ends
	// hostKeyErr is the host key callback's refusal, which is the host key's failure.
	hostKeyErr error
	over       bool // NewClientConn returned: later key exchanges (rekeys) change nothing
}

// start arms st: the handshake has no context of its own, closing the connection ends it.
func (h *handshake) start(st *stage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st = st
	h.stop = context.AfterFunc(st.ctx, func() { h.tcp.Close() })
}

// hostKeyChecked is called with the host key callback's verdict.
func (h *handshake) hostKeyChecked(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over || h.st.name != StageSSHHandshake {
		return
	}
	if err != nil {
		h.hostKeyErr = err
		return
	}
	if !h.stop() {
		// The handshake's bound (or ctx) ended it just now: the failure stays the handshake's.
		return
	}
	h.st.cancel()
	h.st = newStage(h.ctx, StageSSHAuth, h.authBound)
	h.stop = context.AfterFunc(h.st.ctx, func() { h.tcp.Close() })
}

// end is called once NewClientConn returned: the stage it ended in, the host key callback's
// refusal, and whether the stage's end closed the connection.
func (h *handshake) end() (st *stage, hostKeyErr error, cut bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.over = true
	return h.st, h.hostKeyErr, !h.stop()
}

// hostKeyTypesError is a handshake that failed because the host offers none of the host key
// types known_hosts holds for it. It unwraps to the *ssh.AlgorithmNegotiationError.
type hostKeyTypesError struct {
	offered, known []string
	err            error
}

func (e *hostKeyTypesError) Error() string {
	return fmt.Sprintf("the host offers host key types %s, known_hosts holds only %s for it",
		strings.Join(e.offered, ", "), strings.Join(e.known, ", "))
}

func (e *hostKeyTypesError) Unwrap() error { return e.err }

// openLibvirt opens a direct-streamlocal channel to the libvirt socket over l and connects
// libvirt's RPC protocol over it, each bounded by LibvirtTimeout and by ctx. A failure closes
// the channel, never l.
func (p *Pool) openLibvirt(ctx context.Context, l *link, tr Tracer) (*Conn, error) {
	trace := &stageTrace{tr: tr}
	trace.next(StageLibvirtSocket, "")
	st := newStage(ctx, StageLibvirtSocket, p.opts.LibvirtTimeout)
	ch, err := p.openSocket(st.ctx, l)
	st.cancel()
	if err != nil {
		de := st.fail(l.addr, err)
		trace.finish(de.Error())
		return nil, de
	}
	trace.next(StageLibvirtConnect, "ok: channel to "+p.opts.Socket+" open")
	defer func() { trace.finish(result(err)) }()
	st = newStage(ctx, StageLibvirtConnect, p.opts.LibvirtTimeout)
	defer st.cancel()
	wc := newWatchedConn(ch)
	lv := libvirt.NewWithDialer(dialers.NewAlreadyConnected(wc))
	// go-libvirt's calls take no context: closing the channel is what ends a stuck connect.
	// abort, not Close: a read error it causes must still wait as handshakeDone describes.
	stop := context.AfterFunc(st.ctx, wc.abort)
	err = lv.ConnectToURI(libvirt.QEMUSystem)
	wc.handshakeDone()
	if !stop() && err == nil {
		err = st.ctx.Err()
	}
	if err != nil {
		wc.Close()
		de := st.fail(l.addr, err)
		err = de
		return nil, de
	}
	return &Conn{addr: l.addr, link: l, lv: lv, ch: wc}, nil
}

// openSocket opens a direct-streamlocal channel to the libvirt socket, as OpenSSH's
// `ssh -L local:/socket` does, bounded by ctx. It opens the channel itself rather than through
// x/crypto's Client.DialContext, which keeps two goroutines per channel for its life (one
// draining its requests, which the link's serve goroutine does here, one copying its stderr, of
// which a streamlocal channel has none: the channel's window bounds what a host could buffer).
func (p *Pool) openSocket(ctx context.Context, l *link) (net.Conn, error) {
	type opened struct {
		ch   ssh.Channel
		reqs <-chan *ssh.Request
		err  error
	}
	res := make(chan opened)
	go func() {
		ch, reqs, err := l.conn.OpenChannel("direct-streamlocal@openssh.com", ssh.Marshal(&struct {
			SocketPath, Reserved0 string
			Reserved1             uint32
		}{SocketPath: p.opts.Socket}))
		select {
		case res <- opened{ch, reqs, err}:
		case <-ctx.Done():
			if ch != nil {
				ch.Close()
			}
		}
	}()
	select {
	case o := <-res:
		if o.err != nil {
			return nil, o.err
		}
		select {
		case l.channelRequests <- o.reqs:
		case <-l.done:
			o.ch.Close()
			return nil, io.EOF
		}
		return &channelConn{Channel: o.ch}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// channelConn is an SSH channel as a net.Conn, for go-libvirt: no addresses, no deadlines
// (x/crypto's own wrapper has neither).
type channelConn struct{ ssh.Channel }

var errNoDeadline = errors.New("ssh channel: deadlines are not supported")

func (c *channelConn) LocalAddr() net.Addr              { return channelAddr{} }
func (c *channelConn) RemoteAddr() net.Addr             { return channelAddr{} }
func (c *channelConn) SetDeadline(time.Time) error      { return errNoDeadline }
func (c *channelConn) SetReadDeadline(time.Time) error  { return errNoDeadline }
func (c *channelConn) SetWriteDeadline(time.Time) error { return errNoDeadline }

type channelAddr struct{}

func (channelAddr) Network() string { return "unix" }
func (channelAddr) String() string  { return "libvirt-socket" }

// watchedConn is the libvirt channel; done closes when it ends (a read fails or it is
// closed), which is how the pool learns that a libvirt connection is gone without depending on
// go-libvirt's internals.
//
// It also orders go-libvirt's connect against its disconnect watcher. ConnectToURI starts the
// goroutine that reads the Libvirt's disconnected channel once the connection ends, and only
// assigns that channel after the handshake, with nothing ordering the two: a connection that
// ends from the other side before any later call (libvirtd stopped, the link killed) is a data
// race. The watcher runs only after the socket's reader sees a read error, so a read error
// during the handshake is held back until handshakeDone, which the dialer calls once
// ConnectToURI has returned. It is not held back when ConnectToURI cannot return without it:
// while a request of the handshake awaits its reply (the failing read is what wakes it with
// ErrInterrupted and ConnectToURI then fails without the assignment), or when go-libvirt itself
// closes the connection (its cleanup after a failed handshake, which waits for the reader).
type watchedConn struct {
	net.Conn
	once sync.Once
	done chan struct{}

	// connected is set once the handshake is over: reads and writes then skip the accounting
	// below, and the atomic load in Read orders everything ConnectToURI did before it.
	connected atomic.Bool
	mu        sync.Mutex
	settled   bool // handshake over, or go-libvirt closed the connection
	written   frameCounter
	read      frameCounter
	changed   chan struct{} // closed and replaced when settled or written changes
	readErr   error         // a read error that came with data, returned by the next Read
}

// holdReadErrorLimit bounds how long a read error is held back during the handshake. The rules
// above release it long before; this only matters if go-libvirt's handshake changes shape.
const holdReadErrorLimit = 5 * time.Second

func newWatchedConn(c net.Conn) *watchedConn {
	return &watchedConn{Conn: c, done: make(chan struct{}), changed: make(chan struct{})}
}

func (c *watchedConn) Read(b []byte) (int, error) {
	// A read error that came with data is returned by the next read, which then goes through
	// the same accounting as a fresh error (and closes done).
	n, err := 0, c.readErr
	if err == nil {
		n, err = c.Conn.Read(b)
		if n > 0 && err != nil {
			// The data first, so that a reply in it is routed before the error is held back;
			// the error comes with the next read.
			c.readErr = err
			err = nil
		}
	}
	if !c.connected.Load() {
		c.mu.Lock()
		c.read.feed(b[:n])
		c.mu.Unlock()
		if err != nil {
			c.holdUntilSettled()
		}
	}
	if err != nil {
		c.ended()
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if !c.connected.Load() {
		c.mu.Lock()
		if c.written.feed(b[:n]) {
			c.notifyLocked()
		}
		c.mu.Unlock()
	}
	return n, err
}

// holdUntilSettled returns once the handshake is over, a request of it awaits its reply, or
// the connection was closed by go-libvirt.
func (c *watchedConn) holdUntilSettled() {
	limit := time.NewTimer(holdReadErrorLimit)
	defer limit.Stop()
	for {
		c.mu.Lock()
		if c.settled || c.written.packets > c.read.packets {
			c.mu.Unlock()
			return
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-limit.C:
			return
		}
	}
}

func (c *watchedConn) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *watchedConn) settle() {
	c.mu.Lock()
	if !c.settled {
		c.settled = true
		c.notifyLocked()
	}
	c.mu.Unlock()
}

// handshakeDone is called once ConnectToURI has returned, whatever it returned.
func (c *watchedConn) handshakeDone() {
	c.settle()
	c.connected.Store(true)
}

// abort closes the channel to end a handshake the caller gave up on. Unlike Close it does not
// release a held read error: ConnectToURI may have completed just now.
func (c *watchedConn) abort() {
	c.Conn.Close()
	c.ended()
}

// Close is go-libvirt's (its Disconnect, its cleanup after a failed handshake) and the pool's
// once the connection is over.
func (c *watchedConn) Close() error {
	c.settle()
	err := c.Conn.Close()
	c.ended()
	return err
}

func (c *watchedConn) ended() { c.once.Do(func() { close(c.done) }) }

// frameCounter counts the complete libvirt RPC packets in a byte stream. Each packet starts
// with its total length (the 4-byte length word included), big-endian.
type frameCounter struct {
	hdr     [4]byte
	hdrLen  int
	rest    int // bytes of the current packet after its length word still to come
	packets int
}

// feed accounts for b and reports whether a packet was completed.
func (f *frameCounter) feed(b []byte) bool {
	completed := false
	for len(b) > 0 {
		if f.rest == 0 {
			k := copy(f.hdr[f.hdrLen:], b)
			f.hdrLen += k
			b = b[k:]
			if f.hdrLen < len(f.hdr) {
				break
			}
			f.hdrLen = 0
			f.rest = int(binary.BigEndian.Uint32(f.hdr[:])) - len(f.hdr)
			if f.rest <= 0 { // malformed: count it and resynchronise on the next word
				f.rest = 0
				f.packets++
				completed = true
			}
			continue
		}
		k := min(f.rest, len(b))
		f.rest -= k
		b = b[k:]
		if f.rest == 0 {
			f.packets++
			completed = true
		}
	}
	return completed
}
