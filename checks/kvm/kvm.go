// Package kvm checks a provider of KVM hypervisors: every host, concurrently, over the host's
// pooled SSH + libvirt connection (package hostpool). libvirt's library version and the host's
// hostname prove the daemon answers; then the configured storage pool must exist and be running,
// and its capacity, allocation and available bytes are reported.
package kvm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
)

// Type is the providers file's name of the type: `type: kvm`.
const Type checks.ProviderType = "kvm"

// The reasons only the kvm type reports (its catalogue, block.go, also lists the shared ones).
// The dial stage of a failure is visible in the reason.
const (
	ReasonKeyMaterialError         checks.Reason = "KeyMaterialError"
	ReasonTCPUnreachable           checks.Reason = "TCPUnreachable"
	ReasonSSHHandshakeFailed       checks.Reason = "SSHHandshakeFailed"
	ReasonSSHAuthFailed            checks.Reason = "SSHAuthFailed"
	ReasonHostKeyUnknown           checks.Reason = "HostKeyUnknown"
	ReasonHostKeyMismatch          checks.Reason = "HostKeyMismatch"
	ReasonLibvirtSocketUnreachable checks.Reason = "LibvirtSocketUnreachable"
	ReasonLibvirtConnectFailed     checks.Reason = "LibvirtConnectFailed"
	ReasonLibvirtError             checks.Reason = "LibvirtError"
	ReasonPoolNotFound             checks.Reason = "PoolNotFound"
	ReasonPoolInactive             checks.Reason = "PoolInactive"
	ReasonPoolBuilding             checks.Reason = "PoolBuilding"
	ReasonPoolDegraded             checks.Reason = "PoolDegraded"
	ReasonPoolInaccessible         checks.Reason = "PoolInaccessible"
)

// The RPCs of one check of one host, in the order they are made.
const (
	rpcLibVersion  = "ConnectGetLibVersion"
	rpcHostname    = "ConnectGetHostname"
	rpcPoolLookup  = "StoragePoolLookupByName"
	rpcPoolGetInfo = "StoragePoolGetInfo"
)

// tuning adjusts the timing of the checker's connection pool; zero fields keep hostpool's
// defaults. The exporter uses the defaults; tests shorten them.
type tuning struct {
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
	DisconnectTimeout time.Duration
	// relearn forgets what each connection told after every check, so that every check makes
	// the four calls of a connection's first one: the way before one call per steady check,
	// for benchmarks side by side.
	relearn bool
}

// Checker checks one kvm provider. It owns the provider's connection pool: Close closes it.
type Checker struct {
	name        string
	storagePool string
	concurrency int
	hosts       []Host
	rpcTimeout  time.Duration
	hostBound   time.Duration
	addrs       []string // dial address of each host, same order
	targets     []string
	pool        *hostpool.Pool
	shared      *sharedPool
	closed      atomic.Bool
	provider    config.Provider
	tuning      tuning
	logger      *slog.Logger

	// facts holds what each host's current libvirt connection told its first check.
	factsMu sync.Mutex
	facts   map[string]linkFacts
}

// sharedPool is a provider's connection pool, shared by the checkers a reload builds for the
// same provider when only its host list changed (Retarget): it closes with its last checker,
// and a checker that closes while others remain closes the links only of its hosts that no
// other checker has.
type sharedPool struct {
	pool  *hostpool.Pool
	mu    sync.Mutex
	users map[*Checker]struct{}
}

var (
	_ checks.Checker             = (*Checker)(nil)
	_ checks.TargetProber        = (*Checker)(nil)
	_ checks.ProbeLimiter        = (*Checker)(nil)
	_ interface{ Close() error } = (*Checker)(nil)
)

// New builds the checker of a kvm provider. It reads the private key (a problem with it becomes
// a KeyMaterialError verdict on every host, never an error here) and opens no connection.
func New(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	return newTuned(p, logger, tuning{})
}

// newTuned is New with the pool's timing adjusted.
func newTuned(p config.Provider, logger *slog.Logger, t tuning) (*Checker, error) {
	k, ok := p.Block.(*Config)
	if !ok {
		return nil, fmt.Errorf("provider %s: no kvm block", p.Name)
	}
	if len(k.Hosts) == 0 && len(k.HostFiles) == 0 {
		return nil, fmt.Errorf("provider %s: no hosts", p.Name)
	}
	if k.StoragePool == "" {
		return nil, fmt.Errorf("provider %s: no storagePool", p.Name)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := build(p, logger, t)
	c.pool = hostpool.New(hostpool.Options{
		Name:                            p.Name,
		User:                            k.User,
		PrivateKeyFile:                  k.PrivateKeyFile,
		PassphraseFile:                  k.PassphraseFile,
		KnownHostsFile:                  k.KnownHostsFile,
		InsecureSkipHostKeyVerification: k.InsecureSkipHostKeyVerification,
		Port:                            c.port(),
		Socket:                          c.socket(),
		TCPTimeout:                      k.TCPTimeout,
		SSHTimeout:                      k.SSHTimeout,
		LibvirtTimeout:                  k.LibvirtTimeout,
		KeepaliveInterval:               t.KeepaliveInterval,
		KeepaliveTimeout:                t.KeepaliveTimeout,
		DisconnectTimeout:               t.DisconnectTimeout,
		Logger:                          logger,
	})
	c.shared = &sharedPool{pool: c.pool, users: map[*Checker]struct{}{c: {}}}
	return c, nil
}

// Retarget returns the checker of p, a new version of this checker's provider, sharing this
// checker's connection pool when nothing but the host list changed: the links of hosts in both
// lists survive, the removed hosts' links close when this checker is closed, the added hosts
// are dialled at their first check. false when anything else changed (a new pool is needed).
// This checker keeps working until it is closed.
func (c *Checker) Retarget(p config.Provider, logger *slog.Logger) (checks.Checker, bool) {
	pk, ok := p.Block.(*Config)
	if !ok || len(pk.Hosts) == 0 && len(pk.HostFiles) == 0 || pk.StoragePool == "" {
		return nil, false
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := build(p, logger, c.tuning)
	// Compared with the defaults filled in, as the pool was built. The concurrency is the
	// checker's, not the pool's (a host file that grows a provider past 640 hosts raises the
	// default).
	a, b := c.provider, n.provider
	ak, bk := *c.block(), *n.block()
	ak.Hosts, bk.Hosts = nil, nil
	ak.Concurrency, bk.Concurrency = 0, 0
	a.Block, b.Block = &ak, &bk
	if !a.Equal(b) {
		return nil, false
	}
	sp := c.shared
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if _, open := sp.users[c]; !open {
		return nil, false
	}
	n.pool, n.shared = sp.pool, sp
	sp.users[n] = struct{}{}
	return n, true
}

// build fills a checker's fields from p (validated by the caller), without a pool.
func build(p config.Provider, logger *slog.Logger, t tuning) *Checker {
	k := p.Block.(*Config)
	port := cmp.Or(k.Port, DefaultPort)
	socket := cmp.Or(k.Socket, DefaultSocket)
	concurrency := k.Concurrency
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	c := &Checker{
		name:        p.Name,
		storagePool: k.StoragePool,
		concurrency: concurrency,
		hosts:       k.Hosts,
		rpcTimeout:  cmp.Or(k.RPCTimeout, DefaultRPCTimeout),
		provider:    p,
		tuning:      t,
		logger:      logger,
	}
	// A private copy, with the defaults filled in as the pool is built.
	kk := new(*k)
	c.provider.Block = kk
	kk.Port, kk.Socket = port, socket
	kk.TCPTimeout = cmp.Or(kk.TCPTimeout, DefaultTCPTimeout)
	kk.SSHTimeout = cmp.Or(kk.SSHTimeout, DefaultSSHTimeout)
	kk.LibvirtTimeout = cmp.Or(kk.LibvirtTimeout, DefaultLibvirtTimeout)
	kk.RPCTimeout = c.rpcTimeout
	c.hostBound = kk.HostBound()
	for _, h := range k.Hosts {
		name := h.Name
		if name == "" {
			name = h.Address
		}
		c.targets = append(c.targets, name)
		c.addrs = append(c.addrs, h.DialAddress(port))
	}
	return c
}

// block is the checker's copy of its provider's block, defaults filled in.
func (c *Checker) block() *Config { return c.provider.Block.(*Config) }

func (c *Checker) port() int      { return c.block().Port }
func (c *Checker) socket() string { return c.block().Socket }

// Name is the provider's name.
func (c *Checker) Name() string { return c.name }

// Type is kvm.
func (c *Checker) Type() checks.ProviderType { return Type }

// Targets are the hosts' names, in the providers file's order.
func (c *Checker) Targets() []string { return append([]string(nil), c.targets...) }

// Close closes the pool's connections; when a checker Retarget built still shares the pool,
// only the links of the hosts that checker does not have.
func (c *Checker) Close() error {
	c.closed.Store(true)
	sp := c.shared
	sp.mu.Lock()
	if _, open := sp.users[c]; !open {
		sp.mu.Unlock()
		return nil
	}
	delete(sp.users, c)
	if len(sp.users) == 0 {
		sp.mu.Unlock()
		return sp.pool.Close()
	}
	sp.mu.Unlock()
	for _, a := range c.addrs {
		sp.forgetUnused(a)
	}
	return nil
}

// forgetUnused closes addr's link unless a checker still using the pool has the host.
func (sp *sharedPool) forgetUnused(addr string) {
	sp.mu.Lock()
	for u := range sp.users {
		if slices.Contains(u.addrs, addr) {
			sp.mu.Unlock()
			return
		}
	}
	sp.mu.Unlock()
	sp.pool.Forget(addr)
}

// Check checks every host, at most the provider's concurrency at once, and returns one verdict
// per host, all by the time ctx ends (plus the time to write them down).
//
// Hosts are taken in an order that keeps failing hosts from costing healthy ones their round:
// first those with a live connection, then hosts without one, and last the hosts whose last
// dial ran out a stage's bound or whose last probe was abandoned. Every host is contacted in
// every round it gets a slot: a host that came back reads Ready at once. A slot is never held
// longer than the host's bound (config.KVMConfig.HostBound: every dial stage and every call
// running out its own bound), so a rack of silent hosts or hung daemons delays the others by at
// most a few bounds per slot.
func (c *Checker) Check(ctx context.Context) []checks.TargetResult {
	start := time.Now()
	results := make([]checks.TargetResult, len(c.hosts))
	order := c.order()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(c.concurrency, len(order)) {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= len(order) {
					return
				}
				i := order[k]
				if ctx.Err() != nil {
					results[i] = notStarted(c.targets[i], start,
						"not started: the round's deadline came while waiting for one of the provider's concurrency slots")
					continue
				}
				results[i] = c.checkHost(ctx, i, time.Now())
			}
		})
	}
	wg.Wait()
	return results
}

// order returns the hosts' indexes, cheapest first (see Check); the file's order within a rank.
func (c *Checker) order() []int {
	rank := func(s hostpool.HostState) int {
		switch s {
		case hostpool.HostConnected:
			return 0
		case hostpool.HostIdle:
			return 1
		}
		return 2
	}
	ranks := make([]int, len(c.addrs))
	order := make([]int, len(c.addrs))
	for i, a := range c.addrs {
		ranks[i], order[i] = rank(c.pool.State(a)), i
	}
	slices.SortStableFunc(order, func(a, b int) int { return ranks[a] - ranks[b] })
	return order
}

// linkFacts is what checks learned on one libvirt connection (l), which later checks on it
// reuse: the library version and the hostname do not change while the connection lives (a
// restarted libvirtd means a new connection), and the storage pool's handle stays good until the
// pool is undefined.
type linkFacts struct {
	l          *libvirt.Libvirt
	known      bool // libVersion and hostname were read on l
	libVersion uint64
	hostname   string
	havePool   bool
	pool       libvirt.StoragePool
}

// factsOf returns what is known of addr's connection l: nothing when l is a new connection.
func (c *Checker) factsOf(addr string, l *libvirt.Libvirt) linkFacts {
	c.factsMu.Lock()
	defer c.factsMu.Unlock()
	if f, ok := c.facts[addr]; ok && f.l == l {
		return f
	}
	return linkFacts{l: l}
}

// keepFacts records what a check learned on addr's connection.
func (c *Checker) keepFacts(addr string, f linkFacts) {
	c.factsMu.Lock()
	defer c.factsMu.Unlock()
	if c.facts == nil {
		c.facts = map[string]linkFacts{}
	}
	c.facts[addr] = f
}

func (c *Checker) forgetFacts(addr string) {
	c.factsMu.Lock()
	defer c.factsMu.Unlock()
	delete(c.facts, addr)
}

// hostInfo is what the RPCs of one check learn.
type hostInfo struct {
	libVersion uint64
	hostname   string
	state      libvirt.StoragePoolState
	capacity   uint64
	allocation uint64
	available  uint64
}

// rpcError names the RPC that failed.
type rpcError struct {
	rpc string
	err error
}

func (e *rpcError) Error() string { return e.rpc + ": " + e.err.Error() }
func (e *rpcError) Unwrap() error { return e.err }

// callTimeoutError is the cause of a probe cut because one call ran out rpcTimeout.
type callTimeoutError struct {
	call  string
	bound time.Duration
}

func (e *callTimeoutError) Error() string {
	return fmt.Sprintf("no reply to %s within rpcTimeout (%v)", e.call, e.bound)
}

// hostBoundError is the cause of a check cut because the host ran out its whole bound (a dial,
// a lost connection and a second dial).
type hostBoundError struct{ bound time.Duration }

func (e *hostBoundError) Error() string {
	return fmt.Sprintf("the host ran out its bound of %v (every dial stage and call bound added up)", e.bound)
}

func (c *Checker) checkHost(ctx context.Context, i int, start time.Time) checks.TargetResult {
	r, _ := c.probeHost(ctx, i, start, hostpool.ProbeOptions{}, nil)
	return r
}

// ProbeLimit is how many on-demand probes of the provider may run at once: its concurrency,
// the number of hosts it is sized to check at once (each probe holds one host's link).
func (c *Checker) ProbeLimit() int { return c.concurrency }

// ProbeTarget checks one host now, on demand, through the same pool as the rounds: it waits for
// a check of the host in progress (a round's) only until ctx ends, and then returns
// checks.ErrBusy, as it does when ctx ends before the host answered after such a wait; it
// never opens a second link to the host. A round that finds this probe running waits for it.
// Nothing a probe finds changes how the rounds order or treat the host. trace, when set,
// receives the waits, the dial stages (or the reuse of the pooled connection) and every
// libvirt call.
func (c *Checker) ProbeTarget(ctx context.Context, target string, trace *checks.Trace) (checks.TargetResult, error) {
	i := slices.Index(c.targets, target)
	if i < 0 {
		return checks.TargetResult{}, checks.ErrUnknownTarget
	}
	opts := hostpool.ProbeOptions{OnDemand: true}
	if trace != nil {
		opts.Trace = trace
	}
	r, err := c.probeHost(ctx, i, time.Now(), opts, trace)
	if errors.Is(err, hostpool.ErrHostBusy) {
		r.NotContacted = true
		return r, checks.ErrBusy
	}
	return r, nil
}

// probeHost checks host i with the pool's probe options, and returns the verdict and the error
// it came from (nil for a host that answered every call).
func (c *Checker) probeHost(ctx context.Context, i int, start time.Time, opts hostpool.ProbeOptions, trace *checks.Trace) (checks.TargetResult, error) {
	target, addr := c.targets[i], c.addrs[i]
	// The host holds its slot at most for its own bound, whatever it does: a retry after a lost
	// connection included. config checks that the bound fits the round.
	hctx, cancelHost := context.WithTimeoutCause(ctx, c.hostBound, &hostBoundError{c.hostBound})
	defer cancelHost()
	var info hostInfo
	var step atomic.Value
	// The RPCs run one after the other: issued together they stall on delayed ACKs over the
	// SSH channel (measured: ~36ms instead of ~0.75ms). Each has its own bound: call starts it,
	// and the probe is abandoned (never the connection) when a call runs it out.
	probe := func(pctx context.Context, cut context.CancelCauseFunc) func(*libvirt.Libvirt) error {
		var bound *time.Timer
		// endCall ends the trace's stage of the call in progress (a no-op without a trace).
		endCall := func(string) {}
		done := func(err error) error {
			if err != nil {
				endCall(err.Error())
			} else {
				endCall("ok")
			}
			return err
		}
		call := func(name string) error {
			if pctx.Err() != nil {
				// Abandoned: the calls left are not made.
				return context.Cause(pctx)
			}
			step.Store(name)
			endCall = trace.Begin("libvirt " + name)
			if bound != nil {
				bound.Stop()
			}
			bound = time.AfterFunc(c.rpcTimeout, func() { cut(&callTimeoutError{name, c.rpcTimeout}) })
			return nil
		}
		return func(l *libvirt.Libvirt) error {
			defer func() {
				if bound != nil {
					bound.Stop()
				}
			}()
			// A connection's first check learns the library version, the hostname and the
			// pool's handle; later checks on it make one call, StoragePoolGetInfo.
			f := c.factsOf(addr, l)
			var err error
			if !f.known {
				if err = call(rpcLibVersion); err != nil {
					return err
				}
				if f.libVersion, err = l.ConnectGetLibVersion(); done(err) != nil {
					return &rpcError{rpcLibVersion, err}
				}
				if err = call(rpcHostname); err != nil {
					return err
				}
				if f.hostname, err = l.ConnectGetHostname(); done(err) != nil {
					return &rpcError{rpcHostname, err}
				}
				f.known = true
				c.keepFacts(addr, f)
			}
			lookup := func() error {
				if err := call(rpcPoolLookup); err != nil {
					return err
				}
				p, err := l.StoragePoolLookupByName(c.storagePool)
				if done(err) != nil {
					f.havePool = false
					c.keepFacts(addr, f)
					return &rpcError{rpcPoolLookup, err}
				}
				f.pool, f.havePool = p, true
				c.keepFacts(addr, f)
				return nil
			}
			cached := f.havePool
			if !cached {
				if err := lookup(); err != nil {
					return err
				}
			}
			var in hostInfo
			for {
				if err = call(rpcPoolGetInfo); err != nil {
					return err
				}
				st, capacity, allocation, available, err := l.StoragePoolGetInfo(f.pool)
				done(err)
				var le libvirt.Error
				if cached && errors.As(err, &le) && le.Code == uint32(libvirt.ErrNoStoragePool) {
					// The handle went stale (the pool was undefined, and maybe defined again
					// with a new UUID): look it up once more before saying it is gone.
					cached = false
					if err := lookup(); err != nil {
						return err
					}
					continue
				}
				if err != nil {
					return &rpcError{rpcPoolGetInfo, err}
				}
				in.state, in.capacity, in.allocation, in.available = libvirt.StoragePoolState(st), capacity, allocation, available
				break
			}
			in.libVersion, in.hostname = f.libVersion, f.hostname
			info = in
			return nil
		}
	}
	run := func() error {
		pctx, cut := context.WithCancelCause(hctx)
		defer cut(nil)
		return c.pool.ProbeWith(pctx, addr, opts, probe(pctx, cut))
	}
	err := run()
	if c.closed.Load() {
		// Closed during the check (a reload retired this checker while a round was running):
		// a link this probe made to a host no other checker has must not outlive it.
		defer c.shared.forgetUnused(addr)
	}
	if connectionLost(err) && hctx.Err() == nil {
		// The link died during the calls (a keepalive closed it, libvirtd exited), or just
		// before the first one: one more attempt within the host's bound redials and says
		// which stage fails now.
		c.logger.Debug("connection lost during the check: retrying once", "target", target, "err", err)
		// The pool may not have noticed yet (go-libvirt's reader sees the end a moment after the
		// call did): without this the retry could be handed the same dead connection.
		c.pool.ConnectionLost(addr)
		err = run()
	}
	if err != nil && !(opts.OnDemand && ctx.Err() != nil && errors.Is(err, hostpool.ErrProbeAbandoned)) {
		// What the connection told may no longer hold (and a dead connection is not kept
		// alive by it): the next check that gets answers learns it again. An on-demand probe
		// cut by its caller's deadline tells nothing new about the connection: the rounds
		// keep making their one call.
		c.forgetFacts(addr)
	}
	if err != nil {
		if errors.Is(err, hostpool.ErrProbeRunning) {
			// Another caller's check of the host is running: this one made no call and learned
			// nothing about the host.
			_, msg := classify(err, "")
			return notStarted(target, start, msg), err
		}
		if errors.Is(err, hostpool.ErrProbeBusy) {
			// No call was made because the last one, abandoned, has not returned: the host
			// still does not answer (a continuing Timeout, which counts as a failed check).
			_, msg := classify(err, "")
			return notContacted(target, start, msg), err
		}
		s, _ := step.Load().(string)
		reason, msg := classify(err, s)
		return verdict(target, start, reason, msg, nil), err
	}
	if c.tuning.relearn {
		c.forgetFacts(addr)
	}
	return c.poolVerdict(target, start, info), nil
}

// connectionLost reports whether a probe failed because the libvirt connection ended under
// it: during a call (ErrInterrupted), or between the pool's liveness check and the first call,
// which go-libvirt reports as EINVAL without sending anything, or as EOF when its write meets
// the closed channel, or as the TCP connection's own end (ECONNRESET, EPIPE) when its write
// reaches a socket the host reset.
func connectionLost(err error) bool {
	return errors.Is(err, libvirt.ErrInterrupted) || errors.Is(err, syscall.EINVAL) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// poolVerdict decides on a host that answered every RPC: the decision comes after the calls
// returned, so it never touches a working connection.
func (c *Checker) poolVerdict(target string, start time.Time, in hostInfo) checks.TargetResult {
	about := fmt.Sprintf("libvirt %s on %s", libVersion(in.libVersion), in.hostname)
	state := stateName(in.state)
	var sp []checks.Sample
	// libvirt reports zero sizes for a pool that is not running: they are left out rather than
	// read as an empty (full) pool.
	if in.state == libvirt.StoragePoolRunning || in.state == libvirt.StoragePoolDegraded {
		sp = PoolSamples(c.storagePool, in.capacity, in.allocation, in.available)
	}
	var reason checks.Reason
	switch in.state {
	case libvirt.StoragePoolRunning:
		return verdict(target, start, checks.ReasonReady, fmt.Sprintf("%s; storage pool %s running: %s available of %s",
			about, c.storagePool, bytesIEC(in.available), bytesIEC(in.capacity)), sp)
	case libvirt.StoragePoolInactive:
		reason = ReasonPoolInactive
	case libvirt.StoragePoolBuilding:
		reason = ReasonPoolBuilding
	case libvirt.StoragePoolDegraded:
		reason = ReasonPoolDegraded
	case libvirt.StoragePoolInaccessible:
		reason = ReasonPoolInaccessible
	default:
		return verdict(target, start, ReasonLibvirtError, fmt.Sprintf("%s; storage pool %s in unknown state %d",
			about, c.storagePool, in.state), sp)
	}
	return verdict(target, start, reason, fmt.Sprintf("%s; storage pool %s is %s", about, c.storagePool, state), sp)
}

// notContacted is the Timeout verdict of a host this round did not contact because an earlier
// call to it is still outstanding: a failed check, but the runner keeps the time of its last
// contact as the check time.
func notContacted(target string, start time.Time, msg string) checks.TargetResult {
	tr := verdict(target, start, checks.ReasonTimeout, msg, nil)
	tr.NotContacted = true
	return tr
}

// notStarted is the result of a host whose check this round did not start (no slot before the
// deadline, or another caller's check of it running): no verdict, and not a check of the host.
func notStarted(target string, start time.Time, msg string) checks.TargetResult {
	tr := notContacted(target, start, msg)
	tr.NotStarted = true
	return tr
}

func verdict(target string, start time.Time, reason checks.Reason, msg string, sp []checks.Sample) checks.TargetResult {
	now := time.Now()
	return checks.TargetResult{
		Target:    target,
		Up:        reason == checks.ReasonReady,
		Reason:    reason,
		Message:   msg,
		Duration:  now.Sub(start),
		CheckedAt: now,
		Samples:   sp,
	}
}

// classify maps an error of hostpool (a dial, a probe) or of libvirt to its reason. step is
// the RPC in progress when a probe was abandoned ("" when unknown).
func classify(err error, step string) (checks.Reason, string) {
	var de *hostpool.DialError
	var le libvirt.Error
	var re *rpcError
	var cte *callTimeoutError
	var hbe *hostBoundError
	switch {
	case errors.Is(err, hostpool.ErrProbeBusy):
		return checks.ReasonTimeout, "the previous check of this host was abandoned at its deadline and has still not " +
			"returned (is libvirtd hung?); no new call is made until it does"
	case errors.Is(err, hostpool.ErrProbeRunning):
		return checks.ReasonTimeout, "another check of this host is running (an overlapping round or another user of the " +
			"pool); this one made no call"
	case errors.Is(err, hostpool.ErrProbeAbandoned) && errors.As(err, &cte):
		return checks.ReasonTimeout, cte.Error() + "; the call is left to finish on the shared connection"
	case errors.Is(err, hostpool.ErrProbeAbandoned) && errors.As(err, &hbe):
		if step == "" {
			step = "libvirtd"
		}
		return checks.ReasonTimeout, fmt.Sprintf("no reply to %s before %v; the call is left to finish on the shared connection", step, hbe)
	case errors.Is(err, hostpool.ErrProbeAbandoned):
		if step == "" {
			step = "libvirtd"
		}
		return checks.ReasonTimeout, fmt.Sprintf("no reply to %s before the deadline; the call is left to finish on the shared connection", step)
	case errors.As(err, &de):
		return classifyDial(de)
	case errors.Is(err, hostpool.ErrClosed):
		return checks.ReasonTimeout, "the checker is closed"
	case hostpool.IsTimeout(err):
		return checks.ReasonTimeout, err.Error()
	case errors.As(err, &le) && le.Code == uint32(libvirt.ErrNoStoragePool):
		return ReasonPoolNotFound, err.Error()
	case errors.Is(err, libvirt.ErrInterrupted):
		return ReasonLibvirtError, fmt.Sprintf("%v: the connection to libvirtd was lost during the call", err)
	case errors.As(err, &re):
		return ReasonLibvirtError, err.Error()
	}
	return ReasonLibvirtError, err.Error()
}

// classifyDial is the verdict of a failed dial. The stage's reason is given only when that
// stage failed or its own bound expired; a dial cut short by the round's deadline (or by
// Close) is a Timeout whose message names the stage it had reached.
func classifyDial(de *hostpool.DialError) (checks.Reason, string) {
	switch {
	case de.Aborted && errors.Is(de.Err, hostpool.ErrClosed):
		return checks.ReasonTimeout, "the checker was closed during the dial: " + de.Error()
	case de.Aborted && errors.As(de.Err, new(*hostBoundError)):
		return checks.ReasonTimeout, fmt.Sprintf("the host's own bound ran out during a second dial, after the connection was lost, at stage %s: %v", de.Stage, de)
	case de.Aborted:
		return checks.ReasonTimeout, fmt.Sprintf("the round's deadline came during the dial, at stage %s: %v", de.Stage, de)
	case de.BoundExpired() && de.Stage == hostpool.StageLibvirtConnect:
		// The channel to the socket opened, so libvirtd accepted the connection: a daemon that
		// then does not answer is hung, the same as one whose calls do not return.
		return checks.ReasonTimeout, fmt.Sprintf("libvirtd accepted the connection but did not answer the connect handshake in time: %v", de)
	}
	return dialReason(de), de.Error()
}

// dialReason is the reason of a dial stage that failed or ran out its own bound.
func dialReason(de *hostpool.DialError) checks.Reason {
	switch de.Stage {
	case hostpool.StageKeyMaterial:
		return ReasonKeyMaterialError
	case hostpool.StageTCP:
		return ReasonTCPUnreachable
	case hostpool.StageSSHHandshake:
		return ReasonSSHHandshakeFailed
	case hostpool.StageHostKey:
		if de.HostKeyUnknown() {
			return ReasonHostKeyUnknown
		}
		return ReasonHostKeyMismatch
	case hostpool.StageSSHAuth:
		return ReasonSSHAuthFailed
	case hostpool.StageLibvirtSocket:
		return ReasonLibvirtSocketUnreachable
	case hostpool.StageLibvirtConnect:
		return ReasonLibvirtConnectFailed
	}
	return ReasonLibvirtError
}

// libVersion renders libvirt's major*1e6 + minor*1e3 + micro.
func libVersion(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}

func stateName(s libvirt.StoragePoolState) string {
	switch s {
	case libvirt.StoragePoolInactive:
		return "inactive"
	case libvirt.StoragePoolBuilding:
		return "building"
	case libvirt.StoragePoolRunning:
		return "running"
	case libvirt.StoragePoolDegraded:
		return "degraded"
	case libvirt.StoragePoolInaccessible:
		return "inaccessible"
	}
	return fmt.Sprintf("state %d", s)
}

// bytesIEC renders a size for messages (the exact numbers are in the metrics).
func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
