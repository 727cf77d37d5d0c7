// This file holds one check of one host: the pass through the pool (the host's link, dialled
// when it has none), the libvirt calls on it, the retry after a lost connection, and how the
// outcome becomes the host's verdict.

package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
)

// probeHost checks host i with the pool's probe options, and returns the verdict and the error
// it came from (nil for a host that answered every call).
func (c *Checker) probeHost(ctx context.Context, i int, start time.Time, opts hostpool.ProbeOptions, trace *checks.Trace) (checks.TargetResult, error) {
	// The host holds its slot at most for its own bound, whatever it does: a retry after a lost
	// connection included. config checks that the bound fits the round.
	hctx, cancelHost := context.WithTimeoutCause(ctx, c.hostBound, &hostBoundError{c.hostBound})
	defer cancelHost()
	p := &hostProbe{c: c, target: c.targets[i], addr: c.addrs[i], start: start, opts: opts, trace: trace}
	err := p.attempt(hctx)
	if c.closed.Load() {
		// Closed during the check (a reload retired this checker while a round was running):
		// a link this probe made to a host no other checker has must not outlive it.
		defer c.shared.forgetUnused(p.addr)
	}
	err = p.retryLost(hctx, err)
	p.settleFacts(ctx, err)
	return p.result(err), err
}

// hostProbe is one check of one host: what its attempts share and what its verdict is made of.
type hostProbe struct {
	c      *Checker
	target string
	addr   string
	start  time.Time
	opts   hostpool.ProbeOptions
	trace  *checks.Trace // nil without a trace
	// step is the RPC in progress (a string), read when the probe was abandoned; the calls
	// may still be running on the pool's goroutine then.
	step atomic.Value
	info hostInfo // what the calls learned, once every one answered
}

// attempt makes one pass through the pool: it takes the host's pooled connection (the pool
// dials the host when it has none) and makes the calls on it, abandoned when hctx ends or a
// call runs out rpcTimeout.
func (p *hostProbe) attempt(hctx context.Context) error {
	pctx, cut := context.WithCancelCause(hctx)
	defer cut(nil)
	calls := &attemptCalls{p: p, ctx: pctx, cut: cut, endCall: func(string) {}}
	return p.c.pool.ProbeWith(pctx, p.addr, p.opts, calls.run)
}

// retryLost makes a second attempt when the first one's connection was lost and the host's
// bound has not run out, and returns the error that stands.
func (p *hostProbe) retryLost(hctx context.Context, err error) error {
	if !connectionLost(err) || hctx.Err() != nil {
		return err
	}
	// The link died during the calls (a keepalive closed it, libvirtd exited), or just
	// before the first one: one more attempt within the host's bound redials and says
	// which stage fails now.
	p.c.logger.Debug("connection lost during the check: retrying once", "target", p.target, "err", checks.Sanitize(err.Error()))
	// The pool may not have noticed yet (go-libvirt's reader sees the end a moment after the
	// call did): without this the retry could be handed the same dead connection.
	p.c.pool.ConnectionLost(p.addr)
	return p.attempt(hctx)
}

// settleFacts forgets what the host's connection told when the probe's outcome (err) says it
// may no longer hold, or when the checker relearns after every check. ctx is the caller's.
func (p *hostProbe) settleFacts(ctx context.Context, err error) {
	switch {
	case err == nil && !p.c.tuning.relearn:
		return
	case err != nil && p.opts.OnDemand && ctx.Err() != nil && errors.Is(err, hostpool.ErrProbeAbandoned):
		// An on-demand probe cut by its caller's deadline tells nothing new about the
		// connection: the rounds keep making their one call.
		return
	}
	// After a failure, what the connection told may no longer hold (and a dead connection is
	// not kept alive by it): the next check that gets answers learns it again.
	p.c.forgetFacts(p.addr)
}

// result is the host's verdict from the probe's outcome (err, nil when every call answered).
func (p *hostProbe) result(err error) checks.TargetResult {
	switch {
	case err == nil:
		return p.c.poolVerdict(p.target, p.start, p.info)
	case errors.Is(err, hostpool.ErrProbeRunning):
		// Another caller's check of the host is running: this one made no call and learned
		// nothing about the host.
		_, msg := classify(err, "")
		return notStarted(p.target, p.start, msg)
	case errors.Is(err, hostpool.ErrProbeBusy):
		// No call was made because the last one, abandoned, has not returned: the host
		// still does not answer (a continuing Timeout, which counts as a failed check).
		_, msg := classify(err, "")
		return notContacted(p.target, p.start, msg)
	}
	s, _ := p.step.Load().(string)
	reason, msg := classify(err, s)
	return verdict(p.target, p.start, reason, msg, nil)
}

// attemptCalls are the libvirt calls of one attempt. The RPCs run one after the other: issued
// together they stall on delayed ACKs over the SSH channel (measured: ~36ms instead of
// ~0.75ms). Each has its own bound: begin starts it, and the attempt is abandoned (never the
// connection) when a call runs it out.
type attemptCalls struct {
	p     *hostProbe
	ctx   context.Context // the attempt's: cut ends it
	cut   context.CancelCauseFunc
	bound *time.Timer // the bound of the call in progress
	// endCall ends the trace's stage of the call in progress (a no-op without a trace).
	endCall func(result string)
}

// run is the attempt's function on the host's connection l: the libvirt stage, then the
// storage pool stage. A connection's first check learns the library version, the hostname and
// the pool's handle; later checks on it make one call, StoragePoolGetInfo.
func (a *attemptCalls) run(l *libvirt.Libvirt) error {
	defer a.stopBound()
	f := a.p.c.factsOf(a.p.addr, l)
	if !f.known {
		if err := a.learnDaemon(l, &f); err != nil {
			return err
		}
	}
	in, err := a.poolInfo(l, &f)
	if err != nil {
		return err
	}
	in.libVersion, in.hostname = f.libVersion, f.hostname
	a.p.info = in
	return nil
}

// learnDaemon is the libvirt stage: it reads the library version and the hostname into f and
// keeps them for the connection's later checks.
func (a *attemptCalls) learnDaemon(l *libvirt.Libvirt, f *linkFacts) error {
	var err error
	if err = a.begin(rpcLibVersion); err != nil {
		return err
	}
	if f.libVersion, err = l.ConnectGetLibVersion(); a.done(err) != nil {
		return &rpcError{rpcLibVersion, err}
	}
	if err = a.begin(rpcHostname); err != nil {
		return err
	}
	if f.hostname, err = l.ConnectGetHostname(); a.done(err) != nil {
		return &rpcError{rpcHostname, err}
	}
	f.known = true
	a.p.c.keepFacts(a.p.addr, *f)
	return nil
}

// poolInfo is the storage pool stage: the pool's state and sizes, through the handle f holds
// (looked up first when it holds none).
func (a *attemptCalls) poolInfo(l *libvirt.Libvirt, f *linkFacts) (hostInfo, error) {
	cached := f.havePool
	if !cached {
		if err := a.lookupPool(l, f); err != nil {
			return hostInfo{}, err
		}
	}
	for {
		if err := a.begin(rpcPoolGetInfo); err != nil {
			return hostInfo{}, err
		}
		st, capacity, allocation, available, err := l.StoragePoolGetInfo(f.pool)
		a.done(err)
		if cached && noStoragePool(err) {
			// The handle went stale (the pool was undefined, and maybe defined again
			// with a new UUID): look it up once more before saying it is gone.
			cached = false
			if err := a.lookupPool(l, f); err != nil {
				return hostInfo{}, err
			}
			continue
		}
		if err != nil {
			return hostInfo{}, &rpcError{rpcPoolGetInfo, err}
		}
		return hostInfo{
			state:      libvirt.StoragePoolState(st),
			capacity:   capacity,
			allocation: allocation,
			available:  available,
		}, nil
	}
}

// lookupPool looks the configured storage pool up by name and keeps its handle in f, or that
// there is none, for the connection's later checks.
func (a *attemptCalls) lookupPool(l *libvirt.Libvirt, f *linkFacts) error {
	if err := a.begin(rpcPoolLookup); err != nil {
		return err
	}
	pool, err := l.StoragePoolLookupByName(a.p.c.storagePool)
	if a.done(err) != nil {
		f.havePool = false
		a.p.c.keepFacts(a.p.addr, *f)
		return &rpcError{rpcPoolLookup, err}
	}
	f.pool, f.havePool = pool, true
	a.p.c.keepFacts(a.p.addr, *f)
	return nil
}

// begin starts call name: its trace stage and its bound. It returns the cause of the attempt's
// end instead when the attempt was abandoned: the calls left are not made.
func (a *attemptCalls) begin(name string) error {
	if a.ctx.Err() != nil {
		return context.Cause(a.ctx)
	}
	a.p.step.Store(name)
	a.endCall = a.p.trace.Begin("libvirt " + name)
	a.stopBound()
	a.bound = time.AfterFunc(a.p.c.rpcTimeout, func() { a.cut(&callTimeoutError{name, a.p.c.rpcTimeout}) })
	return nil
}

// done ends the trace's stage of the call in progress with err's outcome, and returns err.
func (a *attemptCalls) done(err error) error {
	if err != nil {
		a.endCall(err.Error())
	} else {
		a.endCall("ok")
	}
	return err
}

// stopBound stops the bound of the last call begun, if any.
func (a *attemptCalls) stopBound() {
	if a.bound != nil {
		a.bound.Stop()
	}
}

// noStoragePool reports whether err is libvirt's answer that the storage pool does not exist.
func noStoragePool(err error) bool {
	var le libvirt.Error
	return errors.As(err, &le) && le.Code == uint32(libvirt.ErrNoStoragePool)
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
		Target: target,
		Up:     reason == checks.ReasonReady,
		Reason: reason,
		// No secret, no control character (libvirt's and sshd's texts come from the host), a
		// bounded length: /probe shows it as it is.
		Message:   checks.Sanitize(msg),
		Duration:  now.Sub(start),
		CheckedAt: now,
		Samples:   sp,
	}
}

// classify maps an error of hostpool (a dial, a probe) or of libvirt to its reason. step is
// the RPC in progress when a probe was abandoned ("" when unknown).
func classify(err error, step string) (checks.Reason, string) {
	var de *hostpool.DialError
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
	case noStoragePool(err):
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
