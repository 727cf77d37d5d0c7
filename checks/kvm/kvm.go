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
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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
	// derived: the block set no concurrency, so a round's slots follow the hosts it checks
	// (DefaultConcurrencyFor), a sharded replica's share rather than the fleet.
	derived    bool
	hosts      []Host
	rpcTimeout time.Duration
	hostBound  time.Duration
	addrs      []string // dial address of each host, same order
	targets    []string
	pool       *hostpool.Pool
	shared     *sharedPool
	closed     atomic.Bool
	provider   config.Provider
	tuning     tuning
	logger     *slog.Logger

	// facts holds what each host's current libvirt connection told its first check.
	factsMu sync.Mutex
	facts   map[string]linkFacts

	// releaseDone is closed when the goroutine of the last release (closing the links of
	// hosts this replica does not own) has ended; nil before the first. Close waits for it.
	// probed holds the hosts (addresses) a /probe checked since the last release, whose links
	// that release keeps. Guarded by releaseMu.
	releaseMu   sync.Mutex
	releaseDone chan struct{}
	probed      map[string]bool
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
	_ checks.SubsetChecker       = (*Checker)(nil)
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
		derived:     k.ConcurrencyDerived,
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
		err := sp.pool.Close()
		c.waitRelease()
		return err
	}
	sp.mu.Unlock()
	for _, a := range c.addrs {
		sp.forgetUnused(a)
	}
	c.waitRelease()
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
	return c.check(ctx, nil)
}

// CheckTargets is Check of the named hosts only (the hosts a sharded replica owns): one verdict
// per host of targets that the checker has, in the checker's order.
//
// Then it releases, in the background, the pooled links of its other hosts, so that a host
// that moved to another replica sees one SSH session, the new owner's, not two: a link is
// closed only when nothing uses it (hostpool.ForgetIdle); one in use, by a /probe of the host or
// an abandoned call, is left for the next round to try again. A /probe of a host this replica
// does not own dials it as usual, and its link is kept while /probe keeps using it: it is
// closed at the end of a round when no /probe of the host came since the end of the round
// before.
func (c *Checker) CheckTargets(ctx context.Context, targets []string) []checks.TargetResult {
	want := make(map[string]bool, len(targets))
	for _, t := range targets {
		want[t] = true
	}
	rs := c.check(ctx, want)
	c.release(want)
	return rs
}

// release closes, on a goroutine of its own, the idle pooled links of the checker's hosts that
// are not in owned; at most one such goroutine runs at a time (Close waits for it). A polite
// libvirt disconnect can take hostpool's DisconnectTimeout, hence not on the round's time.
func (c *Checker) release(owned map[string]bool) {
	var addrs []string
	for i, t := range c.targets {
		if !owned[t] {
			addrs = append(addrs, c.addrs[i])
		}
	}
	if len(addrs) == 0 {
		return
	}
	c.releaseMu.Lock()
	defer c.releaseMu.Unlock()
	if c.closed.Load() {
		return
	}
	if c.releaseDone != nil {
		select {
		case <-c.releaseDone:
		default:
			return // the last one still runs; the next round tries again
		}
	}
	probed := c.probed
	c.probed = nil
	done := make(chan struct{})
	c.releaseDone = done
	go func() {
		defer close(done)
		for _, a := range addrs {
			if c.closed.Load() {
				return
			}
			if probed[a] {
				continue
			}
			if c.pool.ForgetIdle(a) {
				c.forgetFacts(a)
				c.logger.Debug("closed the link of a host another replica owns", "addr", a)
			}
		}
	}()
}

// markProbed records that a /probe used addr's link, which the next release keeps.
func (c *Checker) markProbed(addr string) {
	c.releaseMu.Lock()
	defer c.releaseMu.Unlock()
	if c.probed == nil {
		c.probed = map[string]bool{}
	}
	c.probed[addr] = true
}

// waitRelease waits for the goroutine of the last release, if one runs. Close calls it once
// closed is set, after which no release starts.
func (c *Checker) waitRelease() {
	c.releaseMu.Lock()
	done := c.releaseDone
	c.releaseMu.Unlock()
	if done != nil {
		<-done
	}
}

// check checks the hosts whose names are in only (every host when only is nil).
func (c *Checker) check(ctx context.Context, only map[string]bool) []checks.TargetResult {
	start := time.Now()
	order := c.order()
	if only != nil {
		order = slices.DeleteFunc(order, func(i int) bool { return !only[c.targets[i]] })
	}
	results := make([]checks.TargetResult, len(c.hosts))
	checked := make([]bool, len(c.hosts))
	for _, i := range order {
		checked[i] = true
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	slots := c.concurrency
	if c.derived {
		slots = DefaultConcurrencyFor(len(order))
	}
	for range min(slots, len(order)) {
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
	if only == nil {
		return results
	}
	mine := results[:0]
	for i, r := range results {
		if checked[i] {
			mine = append(mine, r)
		}
	}
	return mine
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
	c.markProbed(c.addrs[i])
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
