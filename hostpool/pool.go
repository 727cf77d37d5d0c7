// Package hostpool keeps one pooled SSH + libvirt connection per KVM host and shares it between
// every user of the host: health probes and long operations (an image upload, a domain create)
// run side by side on the same link, and no user can take the link away from another.
//
// go-libvirt's RPCs and x/crypto's SSH handshake take no context, so the pool supplies the
// bounds itself:
//   - Acquire waits for the host's slot (a one-slot channel guarding the host's connection and
//     its dial) only until the caller's context ends; the uncontended take never blocks. The
//     slot is held while the connection is checked or dialled, not while it is used.
//   - A dial is bounded at each stage (TCP connect, SSH handshake and authentication, libvirt
//     socket, libvirt connect) by the stage's own bound and by the caller's context; each
//     failure is a *DialError carrying its Stage, whether the caller cut it short (Aborted), and
//     its cause. Every Acquire without a live connection dials: a host that comes back is seen
//     by the next caller. A host whose last dial ran out a stage's bound, or whose last probe
//     was abandoned, reads HostUnresponsive in State, so that callers with many hosts can take
//     it last. On-demand probes (ProbeOptions.OnDemand) never change that state: a probe cut by
//     its caller's short deadline says nothing the rounds should act on.
//   - Probe runs a short sequence of RPCs; when the context ends first the caller gets a timeout
//     at once and the RPCs are abandoned, never the connection. At most one probe per host is
//     outstanding: while an abandoned probe has not returned, the next probe of that host
//     returns ErrProbeBusy immediately, without dialing.
//   - An SSH keepalive closes a dead link (which wakes pending RPCs with libvirt.ErrInterrupted);
//     the next Acquire redials. A live link is never closed because a caller gave up.
package hostpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/provider-health-exporter/provider-health-exporter/internal/redact"
)

// Defaults of Options.
const (
	DefaultPort              = 22
	DefaultSocket            = "/var/run/libvirt/libvirt-sock"
	DefaultKeepaliveInterval = 10 * time.Second
	DefaultKeepaliveTimeout  = 10 * time.Second
	DefaultDisconnectTimeout = 2 * time.Second
	// The bounds of the dial's stages. A healthy host answers each in milliseconds; a host
	// that drops packets, or accepts TCP and never speaks SSH, costs at most this long.
	DefaultTCPTimeout     = 2 * time.Second
	DefaultSSHTimeout     = 2 * time.Second
	DefaultLibvirtTimeout = time.Second
)

var (
	// ErrProbeBusy is returned by Probe, at once and without dialing, while an earlier probe of
	// the same host that was abandoned at its deadline has still not returned (a hung libvirtd).
	ErrProbeBusy = errors.New("a previous probe of the host, abandoned at its deadline, has not returned yet")
	// ErrProbeRunning is returned by Probe, at once and without dialing, while another caller's
	// probe of the same host is running and has not been abandoned: nothing is known to be wrong.
	ErrProbeRunning = errors.New("another probe of the host is running")
	// ErrProbeAbandoned is returned by Probe when its context ended before the RPCs returned;
	// it is joined with the context's error.
	ErrProbeAbandoned = errors.New("probe abandoned when its context ended")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("host pool closed")
	// ErrHostBusy is joined to the error of a caller whose context ended while it waited for
	// the host: for its connection slot (another caller dialing), or, on an on-demand probe,
	// for another probe of the host to finish. It is joined too to the error of an on-demand
	// probe whose context ended before the host answered after such a wait: the wait took the
	// time the host would have had. Nothing is known about the host from it.
	ErrHostBusy = errors.New("the host was busy with another caller until the deadline")
)

// Tracer receives the stages of a probe (waiting for the host, each dial stage, the reuse of
// the pooled connection) for a diagnostic trace; *checks.Trace is one. Begin returns the
// function that ends the stage with its result. A nil Tracer records nothing.
type Tracer interface {
	Begin(stage string) (end func(result string))
}

func noEnd(string) {}

// begin starts a stage on tr; nothing (and no allocation) when tr is nil, as in the rounds.
func begin(tr Tracer, stage string) func(string) {
	if tr == nil {
		return noEnd
	}
	return tr.Begin(stage)
}

// result renders an error as a trace result.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// waitError is the error of a wait for the host that ended with the caller's context: its text
// says what was awaited; it unwraps to ErrHostBusy and the context's cause.
type waitError struct {
	msg   string
	cause error
}

func (e *waitError) Error() string   { return e.msg + ": " + e.cause.Error() }
func (e *waitError) Unwrap() []error { return []error{ErrHostBusy, e.cause} }

// IsTimeout reports whether err means "no answer in time" rather than an answer that was an
// error: a context that ended (waiting for the slot, dialing, or during a probe), an abandoned
// probe, or a busy one.
func IsTimeout(err error) bool {
	var de *DialError
	if errors.As(err, &de) {
		return de.Timeout()
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, ErrProbeBusy) || errors.Is(err, ErrProbeRunning) || errors.Is(err, ErrProbeAbandoned)
}

// Options configure a Pool. User and either PrivateKeyFile or Signer are needed; host keys are
// verified with KnownHostsFile (or HostKeyCallback) unless InsecureSkipHostKeyVerification is
// set explicitly.
type Options struct {
	// Name identifies the pool in logs and is the `provider` label of its metrics. Pools with
	// the same name (a provider rebuilt by a reload) share their metrics.
	Name string
	// User is the SSH user on every host.
	User string
	// PrivateKeyFile is read at New, and again at a dial when it or PassphraseFile (optional)
	// changed: a rotated key takes effect at the next dial, without rebuilding the pool.
	PrivateKeyFile string
	PassphraseFile string
	// Signer, when set, is used instead of PrivateKeyFile.
	Signer ssh.Signer
	// KnownHostsFile is checked at every dial and parsed again when it changed.
	KnownHostsFile string
	// HostKeyCallback, when set, is used instead of KnownHostsFile.
	HostKeyCallback ssh.HostKeyCallback
	// InsecureSkipHostKeyVerification accepts any host key. New logs a warning when it is set.
	InsecureSkipHostKeyVerification bool
	// Port is the SSH port of addresses that carry none (default 22).
	Port int
	// Socket is the libvirt socket path on the hosts (default /var/run/libvirt/libvirt-sock).
	Socket string
	// KeepaliveInterval is how often an idle or busy link is checked; KeepaliveTimeout how
	// long a keepalive may go unanswered before the link is closed as dead.
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
	// DisconnectTimeout bounds the polite libvirt disconnect at Close, and how long Close waits
	// for abandoned probes to return once the links are closed.
	DisconnectTimeout time.Duration
	// TCPTimeout bounds the TCP connect of a dial; SSHTimeout the SSH handshake up to the host
	// key's acceptance, and again authentication from then on; LibvirtTimeout each of opening the channel to
	// the libvirt socket and libvirt's connect handshake. A dial also ends with the caller's
	// context; a stage cut by it reports Aborted, never the stage's failure.
	TCPTimeout     time.Duration
	SSHTimeout     time.Duration
	LibvirtTimeout time.Duration
	// Logger receives the pool's logs (default: discarded).
	Logger *slog.Logger
	// Registerer, when set, gets the collector of every pool's metrics (Collector). Registering
	// it again, from another pool or a rebuilt one, is not an error.
	Registerer prometheus.Registerer
}

// Pool is a set of pooled connections, one per host address. It is safe for concurrent use.
type Pool struct {
	opts   Options
	logger *slog.Logger
	stats  *providerStats
	// closing is closed by Close; closeCtx ends with it (it ends in-flight dials).
	closing  chan struct{}
	closeCtx context.Context
	stopAll  context.CancelCauseFunc

	creds credentials

	mu     sync.Mutex
	closed bool
	hosts  map[string]*host
	links  map[*link]struct{}
	// keepaliveStarted: the keepalive loop runs (from the first link on); checkNow feeds it.
	keepaliveStarted bool
	checkNow         chan *link

	bg     sync.WaitGroup // the pool's own goroutines: link watchers, keepalives, disconnects
	probes sync.WaitGroup // probes, abandoned or not

	local *counters
}

// host is the pool's entry for one address.
type host struct {
	addr string
	// slot guards link and conn: held while they are checked or replaced (a dial), never while
	// the connection is used.
	slot chan struct{}
	// probe is held by the host's running probe, until its RPCs return (abandoned or not).
	probe chan struct{}

	link *link
	conn *Conn
	// live mirrors conn for State, which does not take the slot.
	live atomic.Pointer[Conn]
	// abandoned is set while the probe holding probe was abandoned at its deadline.
	abandoned atomic.Bool
	// onDemand is set while probe is held by an on-demand probe (ProbeOptions.OnDemand).
	onDemand atomic.Bool
	// freed is closed (and replaced) whenever probe is given back or its holder is
	// abandoned, waking the callers waiting for it; guarded by mu.
	mu    sync.Mutex
	freed chan struct{}
	// unresponsive is set when the host's last dial ran out a stage's bound or its last probe
	// was abandoned, and cleared when a dial or a probe gets its answers in time.
	unresponsive atomic.Bool
}

var linkSeq atomic.Uint64

// link is one SSH connection. Its goroutines are x/crypto's three (transport, key exchange,
// multiplexer), go-libvirt's two on its libvirt channel, and one of the pool's, serve, which
// answers what the host sends unasked and notices the link's end: ssh.NewClient would add three,
// a channel opened with its DialContext two more, and a keepalive loop per link one.
type link struct {
	id   uint64
	addr string
	conn ssh.Conn
	done chan struct{} // closed when the SSH connection has ended
	// channelRequests hands serve the requests channel of each libvirt channel opened on the
	// link, which must be drained for the link to keep moving.
	channelRequests chan (<-chan *ssh.Request)
	// keepaliveRunning is set while a keepalive of the link awaits its reply.
	keepaliveRunning atomic.Bool
	// reqs and chans are what the host sends unasked, for serve.
	reqs  <-chan *ssh.Request
	chans <-chan ssh.NewChannel
}

func (l *link) alive() bool {
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}

// Conn is a libvirt connection over a pooled SSH link. Callers share it: use it between
// Acquire and release, concurrently with others; never close it.
type Conn struct {
	addr string
	link *link
	lv   *libvirt.Libvirt
	ch   *watchedConn
	refs atomic.Int64
}

// Libvirt is the libvirt RPC client. Its calls take no context: bound them with Probe, or
// accept that they end only with the reply or the link.
func (c *Conn) Libvirt() *libvirt.Libvirt { return c.lv }

func (c *Conn) alive() bool {
	select {
	case <-c.ch.done:
		return false
	default:
		return c.link.alive()
	}
}

// New returns a pool. It reads the private key now, so that a problem with it is logged at once;
// a key that cannot be used makes every dial fail with StageKeyMaterial (it never panics and
// never falls back to anything else). It opens no connection.
func New(opts Options) *Pool {
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	if opts.Socket == "" {
		opts.Socket = DefaultSocket
	}
	if opts.KeepaliveInterval <= 0 {
		opts.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if opts.DisconnectTimeout <= 0 {
		opts.DisconnectTimeout = DefaultDisconnectTimeout
	}
	if opts.TCPTimeout <= 0 {
		opts.TCPTimeout = DefaultTCPTimeout
	}
	if opts.SSHTimeout <= 0 {
		opts.SSHTimeout = DefaultSSHTimeout
	}
	if opts.LibvirtTimeout <= 0 {
		opts.LibvirtTimeout = DefaultLibvirtTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		opts:     opts,
		logger:   logger,
		closing:  make(chan struct{}),
		hosts:    map[string]*host{},
		links:    map[*link]struct{}{},
		checkNow: make(chan *link, 1),
		local:    newCounters(),
	}
	p.closeCtx, p.stopAll = context.WithCancelCause(context.Background())
	p.stats = shared.join(opts.Name)
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(theCollector); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				logger.Warn("cannot register the host pool metrics", "err", redact.Err(err))
			}
		}
	}
	if opts.InsecureSkipHostKeyVerification && opts.HostKeyCallback == nil {
		logger.Warn("ssh host key verification is off (insecureSkipHostKeyVerification): any machine answering at a host's address is trusted",
			"hostpool", opts.Name)
	}
	if opts.Signer == nil {
		if _, err := p.signer(); err != nil {
			logger.Warn("ssh private key unusable: every dial fails until it is fixed", "hostpool", opts.Name, "err", redact.Err(err))
		}
	}
	return p
}

// normalize returns addr as host:port, adding the pool's port when it carries none.
func (p *Pool) normalize(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), strconv.Itoa(p.opts.Port))
}

func (p *Pool) entry(addr string) (*host, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	h, ok := p.hosts[addr]
	if !ok {
		h = &host{addr: addr, slot: make(chan struct{}, 1), probe: make(chan struct{}, 1), freed: make(chan struct{})}
		p.hosts[addr] = h
	}
	return h, nil
}

// Acquire returns the host's connection, dialing it when there is none or it died. It waits for
// the host's slot (held by another caller checking or dialing the connection) only until ctx
// ends; the dial itself is bounded by ctx. The connection is shared: release says the caller is
// done with it (it stays open for the next user). A dial failure is a *DialError.
func (p *Pool) Acquire(ctx context.Context, addr string) (*Conn, func(), error) {
	c, release, _, err := p.acquire(ctx, p.normalize(addr), nil, true)
	return c, release, err
}

// acquire is Acquire of a normalized address, reporting its stages to tr; waited says whether
// it had to wait for the slot. A dial's failure ranks the host (HostUnresponsive) only when
// rank is set.
func (p *Pool) acquire(ctx context.Context, addr string, tr Tracer, rank bool) (c *Conn, release func(), waited bool, err error) {
	h, err := p.entry(addr)
	if err != nil {
		return nil, nil, false, err
	}
	select {
	case h.slot <- struct{}{}:
	default:
		waited = true
		end := begin(tr, "wait for the host's connection slot")
		select {
		case h.slot <- struct{}{}:
			end("ok")
		case <-ctx.Done():
			err := &waitError{fmt.Sprintf("waiting for the connection slot of %s (another caller is dialing it)", addr), context.Cause(ctx)}
			end(err.Error())
			return nil, nil, waited, err
		case <-p.closing:
			end(ErrClosed.Error())
			return nil, nil, waited, ErrClosed
		}
	}
	c, err = p.connect(ctx, h, tr, rank)
	<-h.slot
	if err != nil {
		return nil, nil, waited, err
	}
	c.refs.Add(1)
	p.local.inUse.Add(1)
	var once sync.Once
	return c, func() {
		once.Do(func() {
			c.refs.Add(-1)
			p.local.inUse.Add(-1)
		})
	}, waited, nil
}

// HostState is what the pool knows of a host without contacting it.
type HostState int

const (
	// HostIdle: no live connection; the next Acquire dials. A link that died and whose death
	// the pool has not noticed yet reads HostIdle too.
	HostIdle HostState = iota
	// HostConnected: the host has a live connection; checking it costs no dial.
	HostConnected
	// HostUnresponsive: the host's last dial ran out a stage's bound (it drops packets, or
	// accepts TCP and never speaks), or its last probe was abandoned (a hung libvirtd). The next
	// Acquire dials, or the next probe runs, as for any host, but may cost its whole bound.
	HostUnresponsive
)

// State reports what the pool knows of addr, so that a caller can check the hosts that cost
// nothing first and the ones that may cost a whole bound last.
func (p *Pool) State(addr string) HostState {
	addr = p.normalize(addr)
	p.mu.Lock()
	h := p.hosts[addr]
	p.mu.Unlock()
	switch {
	case h == nil:
		return HostIdle
	case h.unresponsive.Load():
		return HostUnresponsive
	}
	if c := h.live.Load(); c != nil && c.alive() {
		return HostConnected
	}
	return HostIdle
}

// Probing reports whether a probe of addr is running (abandoned or not), without waiting.
func (p *Pool) Probing(addr string) bool {
	addr = p.normalize(addr)
	p.mu.Lock()
	h := p.hosts[addr]
	p.mu.Unlock()
	return h != nil && len(h.probe) > 0
}

// setUnresponsive records whether the host's last dial or probe ran out its bound, and keeps the
// provider's count of such hosts.
func (p *Pool) setUnresponsive(h *host, v bool) {
	if h.unresponsive.Swap(v) == v {
		return
	}
	d := int64(1)
	if !v {
		d = -1
	}
	p.local.unresponsive.Add(d)
	p.stats.unresponsive.Add(d)
}

// connect returns h's live connection or makes one; a failed dial ranks the host only when
// rank is set. The caller holds h.slot.
func (p *Pool) connect(ctx context.Context, h *host, tr Tracer, rank bool) (*Conn, error) {
	if h.conn != nil && h.conn.alive() {
		if tr != nil {
			begin(tr, "pooled connection")(fmt.Sprintf("ok: reusing the live link %d (no dial)", h.conn.link.id))
		}
		return h.conn, nil
	}
	if h.conn != nil {
		h.conn.ch.Close() // already ended; this frees the channel
		h.conn = nil
		h.live.Store(nil)
	}
	if h.link != nil && !h.link.alive() {
		h.link = nil
	}
	// The dial also ends when the pool closes, so that Close never waits for a slow host.
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopClose := context.AfterFunc(p.closeCtx, func() { cancel(ErrClosed) })
	defer stopClose()

	var c *Conn
	for redialled := false; ; redialled = true {
		if h.link == nil {
			l, err := p.dialLink(dctx, h.addr, tr)
			if err != nil {
				p.dialFailed(h, err, rank)
				p.logger.Debug("dial failed", "hostpool", p.opts.Name, "addr", h.addr, "err", redact.Err(err))
				return nil, err
			}
			if !p.adopt(l) {
				l.conn.Close()
				return nil, ErrClosed
			}
			h.link = l
		} else if tr != nil {
			begin(tr, "pooled ssh link")(fmt.Sprintf("ok: reusing the live link %d (no ssh dial)", h.link.id))
		}
		var err error
		c, err = p.openLibvirt(dctx, h.link, tr)
		if err == nil {
			break
		}
		if !redialled && dctx.Err() == nil && linkEnded(h.link, err) {
			// The link died under the libvirt channel (the keepalive had not noticed yet): libvirt is
			// not to blame. A new link says which stage fails now, if any.
			p.logger.Debug("ssh link found dead when opening the libvirt channel: redialling", "hostpool", p.opts.Name,
				"addr", h.addr, "link", h.link.id, "err", redact.Err(err))
			h.link.conn.Close()
			h.link = nil
			continue
		}
		// The SSH link stays when it is alive: the next attempt needs no new handshake.
		p.dialFailed(h, err, rank)
		p.logger.Debug("libvirt connect failed", "hostpool", p.opts.Name, "addr", h.addr, "err", redact.Err(err))
		return nil, err
	}
	p.countDial(nil)
	h.conn = c
	h.live.Store(c)
	return c, nil
}

// linkEnded reports whether openLibvirt failed because l has ended rather than because of
// libvirt: x/crypto answers a channel open on a connection that has ended, or that ends before
// the host replied, with io.EOF (a refusal by the host is an *ssh.OpenChannelError), and the
// watcher closes l.done once the connection's end is known.
func linkEnded(l *link, err error) bool {
	var de *DialError
	if errors.As(err, &de) && de.Stage == StageLibvirtSocket && errors.Is(err, io.EOF) {
		return true
	}
	return !l.alive()
}

// ConnectionLost tells the pool that a call on addr's libvirt connection found it ended (EOF, a
// reset, go-libvirt's ErrInterrupted): the connection's channel is closed now, so that the next
// Acquire opens a new channel (and redials the link when the link is dead too) rather than
// finding the connection alive until go-libvirt's reader notices the end. A probe still running
// on it gets ErrInterrupted.
func (p *Pool) ConnectionLost(addr string) {
	addr = p.normalize(addr)
	p.mu.Lock()
	h := p.hosts[addr]
	p.mu.Unlock()
	if h == nil {
		return
	}
	if c := h.live.Load(); c != nil {
		c.ch.abort()
	}
}

// dialFailed counts a failed dial and, when rank is set, records whether its stage ran out its
// own bound (the host did not answer in time) or the host answered. A dial cut short by the
// caller says nothing about the host. The caller holds h.slot.
func (p *Pool) dialFailed(h *host, err error, rank bool) {
	p.countDial(err)
	var de *DialError
	if !rank || !errors.As(err, &de) || de.Aborted {
		return
	}
	p.setUnresponsive(h, de.BoundExpired())
}

// Forget closes addr's connection and drops the host from the pool: the host was removed from
// the provider. Other hosts' links are untouched. A probe of the host still running keeps its
// connection until the link closes under it.
func (p *Pool) Forget(addr string) {
	addr = p.normalize(addr)
	p.mu.Lock()
	h, ok := p.hosts[addr]
	if !ok || p.closed {
		p.mu.Unlock()
		return
	}
	delete(p.hosts, addr)
	p.creds.forget(addr)
	p.setUnresponsive(h, false)
	// Counted under mu before Close can start waiting for bg, so the two never race.
	p.bg.Add(1)
	defer p.bg.Done()
	p.mu.Unlock()
	// Waits for a dial in flight (bounded by its stage bounds); the slot is never given back,
	// so a caller still holding the old entry waits only until its context ends.
	h.slot <- struct{}{}
	if h.conn != nil || h.link != nil {
		p.closeHost(h)
	}
}

// ForgetIdle is Forget of a host nobody is using: it closes addr's connection and drops the host
// only when no probe of it runs (abandoned or not, on demand or not), no dial of it is in flight
// and no caller holds its connection, and reports whether it did (false when the pool has no
// such host or it is busy: nothing changes). A probe that starts afterwards dials a new link. A
// sharded replica releases with it the links of the hosts it no longer owns, without cutting a
// check of them under way.
func (p *Pool) ForgetIdle(addr string) bool {
	addr = p.normalize(addr)
	p.mu.Lock()
	h, ok := p.hosts[addr]
	p.mu.Unlock()
	if !ok {
		return false
	}
	// The probe first (no probe can start while it is held), then the slot (no dial is in
	// flight), neither waited for.
	h.mu.Lock()
	select {
	case h.probe <- struct{}{}:
		h.mu.Unlock()
	default:
		h.mu.Unlock()
		return false
	}
	select {
	case h.slot <- struct{}{}:
	default:
		h.releaseProbe()
		return false
	}
	giveBack := func() bool {
		<-h.slot
		h.releaseProbe()
		return false
	}
	if c := h.conn; c != nil && c.refs.Load() > 0 {
		return giveBack()
	}
	p.mu.Lock()
	if p.closed || p.hosts[addr] != h {
		// Close is waiting for this slot, or Forget dropped the host meanwhile.
		p.mu.Unlock()
		return giveBack()
	}
	delete(p.hosts, addr)
	p.creds.forget(addr)
	p.setUnresponsive(h, false)
	p.bg.Add(1)
	defer p.bg.Done()
	p.mu.Unlock()
	if h.conn != nil || h.link != nil {
		p.closeHost(h)
	}
	// The slot stays taken, as Forget leaves it; the probe is given back so that a probe
	// waiting for it goes on (through a new entry, with a new link).
	h.releaseProbe()
	return true
}

// adopt registers a new link and starts its goroutine (serve), and the pool's keepalive loop
// with the first link; false when the pool closed meanwhile.
func (p *Pool) adopt(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	p.local.links.Add(1)
	p.stats.links.Add(1)
	if !p.keepaliveStarted {
		p.keepaliveStarted = true
		p.bg.Go(p.keepaliveLoop)
	}
	p.bg.Go(func() { p.serve(l, l.reqs, l.chans) })
	return true
}

// Close closes every connection: in-flight dials give up, each live libvirt connection is
// closed politely (bounded by DisconnectTimeout: a hung libvirtd does not hold Close), then every
// SSH link is closed, which ends pending RPCs with libvirt.ErrInterrupted. It waits for every
// goroutine of the pool, and for abandoned probes up to DisconnectTimeout.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.closing)
	p.stopAll(ErrClosed)
	hosts := make([]*host, 0, len(p.hosts))
	for _, h := range p.hosts {
		hosts = append(hosts, h)
		p.setUnresponsive(h, false)
	}
	p.mu.Unlock()

	// Taking every slot waits for in-flight dials, which end promptly now that closing is
	// closed. The slots are never given back: the pool is done.
	var wg sync.WaitGroup
	for _, h := range hosts {
		h.slot <- struct{}{}
		if h.conn == nil && h.link == nil {
			continue
		}
		wg.Go(func() { p.closeHost(h) })
	}
	wg.Wait()
	// Links that lost their host entry's reference (none should) are closed too.
	p.mu.Lock()
	var rest []*link
	for l := range p.links {
		rest = append(rest, l)
	}
	p.mu.Unlock()
	for _, l := range rest {
		l.conn.Close()
	}
	p.bg.Wait()

	var err error
	probesDone := make(chan struct{})
	go func() { p.probes.Wait(); close(probesDone) }()
	select {
	case <-probesDone:
	case <-time.After(p.opts.DisconnectTimeout):
		err = fmt.Errorf("close pool %s: %d abandoned probes still running after their links closed", p.opts.Name, p.local.abandoned.Load())
	}
	shared.leave(p.opts.Name, p.stats)
	return err
}

// closeHost ends h's libvirt connection politely when it is alive, then the SSH link.
func (p *Pool) closeHost(h *host) {
	if c := h.conn; c != nil && c.alive() {
		if n := c.refs.Load(); n > 0 {
			p.logger.Debug("closing a connection still in use", "hostpool", p.opts.Name, "addr", h.addr, "users", n)
		}
		disconnected := make(chan struct{})
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			defer close(disconnected)
			// Disconnect waits for libvirtd's reply without a bound; closing the link ends it.
			if err := c.lv.Disconnect(); err != nil {
				p.logger.Debug("libvirt disconnect", "hostpool", p.opts.Name, "addr", h.addr, "err", redact.Err(err))
			}
		}()
		select {
		case <-disconnected:
		case <-time.After(p.opts.DisconnectTimeout):
			p.logger.Warn("libvirt disconnect did not finish in time: closing the link", "hostpool", p.opts.Name,
				"addr", h.addr, "timeout", p.opts.DisconnectTimeout)
		}
	}
	if h.conn != nil {
		h.conn.ch.Close()
	}
	if h.link != nil {
		h.link.conn.Close()
	}
}
