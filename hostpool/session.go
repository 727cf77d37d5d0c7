package hostpool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/digitalocean/go-libvirt"

	"github.com/provider-health-exporter/provider-health-exporter/internal/redact"
)

// Probe runs fn with the host's connection and waits for it only until ctx ends. Then it
// returns an error joining ErrProbeAbandoned and ctx's error at once, while fn keeps running
// detached on the same connection, which stays open for everyone else. Until fn returns, later
// probes of the host return ErrProbeBusy at once, without dialing; afterwards the host is
// probed on the same connection again. fn must only make RPCs on the connection: they end with
// their reply or with the link.
func (p *Pool) Probe(ctx context.Context, addr string, fn func(*libvirt.Libvirt) error) error {
	return p.ProbeWith(ctx, addr, ProbeOptions{}, fn)
}

// ProbeOptions adjust a probe.
type ProbeOptions struct {
	// OnDemand marks a probe made outside the rounds (the exporter's /probe). Its outcome never
	// changes the host's State: neither a probe abandoned at its (caller's) deadline nor a dial
	// stage it ran out marks the host unresponsive, and no answer clears it; only the callers
	// that check hosts in turn (the rounds) rank them. It waits for a
	// running probe of the host until ctx ends, instead of returning ErrProbeRunning at once,
	// and then fails with an error that unwraps to ErrHostBusy, as it does when ctx ends before
	// the host answered after such a wait (or a wait for the connection slot); it still returns ErrProbeBusy
	// at once while an abandoned probe of the host has not returned (the host is hung: there is
	// nothing to wait for). A probe that is not on demand and finds an on-demand probe running
	// waits for it until its own ctx ends, so that an on-demand probe never costs a round its
	// verdict; it then fails as it would have at once (ErrProbeBusy when the on-demand probe
	// was abandoned, ErrProbeRunning otherwise).
	OnDemand bool
	// Trace, when set, receives the probe's stages: the waits for the host, the reuse of its
	// connection or each stage of the dial. fn reports its own calls.
	Trace Tracer
}

// ProbeWith is Probe with options.
func (p *Pool) ProbeWith(ctx context.Context, addr string, opts ProbeOptions, fn func(*libvirt.Libvirt) error) error {
	addr = p.normalize(addr)
	h, err := p.entry(addr)
	if err != nil {
		return err
	}
	waited, err := p.takeProbe(ctx, h, opts)
	if err != nil {
		return err
	}
	rank := !opts.OnDemand
	c, release, slotWaited, err := p.acquire(ctx, addr, opts.Trace, rank)
	waited = waited || slotWaited
	// queued marks the error of an on-demand probe that waited for the host and then ran out
	// its context: the wait, not the host, took its time.
	queued := func(err error) error {
		if opts.OnDemand && waited && ctx.Err() != nil && !errors.Is(err, ErrHostBusy) {
			return fmt.Errorf("%w after waiting for another caller of the host: %w", ErrHostBusy, err)
		}
		return err
	}
	if err != nil {
		h.releaseProbe()
		return queued(err)
	}
	if testHookAcquired != nil {
		testHookAcquired()
	}
	// Counted under mu, where Close marks the pool closed before it waits for probes: an Add
	// never races that Wait.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		release()
		h.releaseProbe()
		return ErrClosed
	}
	p.probes.Add(1)
	p.mu.Unlock()

	const running, finished, abandoned = 0, 1, 2
	var state atomic.Int32
	done := make(chan error, 1)
	counted := make(chan struct{}) // closed once an abandoned probe is counted
	go func() {
		defer p.probes.Done()
		err := fn(c.Libvirt())
		if state.CompareAndSwap(running, finished) {
			done <- err
			return
		}
		// Abandoned: this goroutine owns the cleanup. It uncounts the probe only once it was
		// counted, so that the count never reads below zero.
		release()
		<-counted
		p.local.abandoned.Add(-1)
		p.stats.abandoned.Add(-1)
		h.abandoned.Store(false)
		h.releaseProbe()
		p.logger.Debug("abandoned probe returned", "hostpool", p.opts.Name, "addr", addr, "err", redact.Err(err))
	}()

	finish := func(err error) error {
		release()
		h.releaseProbe()
		return err
	}
	setUnresponsive := func(v bool) {
		if rank {
			p.setUnresponsive(h, v)
		}
	}
	select {
	case err := <-done:
		setUnresponsive(false)
		return finish(err)
	case <-ctx.Done():
		if !state.CompareAndSwap(running, abandoned) {
			setUnresponsive(false)
			return finish(<-done) // fn returned just now: its result stands
		}
		setUnresponsive(true)
		if testHookAbandoned != nil {
			testHookAbandoned()
		}
		h.setAbandoned()
		// A hung libvirtd or a link that died without a word: a keepalive now tells them apart,
		// and closes a dead link, which ends the abandoned calls so that the next check redials.
		p.checkSoon(c.link)
		p.local.abandoned.Add(1)
		p.stats.abandoned.Add(1)
		close(counted)
		return queued(fmt.Errorf("probe %s: %w", addr, errors.Join(ErrProbeAbandoned, context.Cause(ctx))))
	}
}

// takeProbe takes h.probe for a probe with opts, waiting as ProbeOptions describes; waited says
// whether it had to wait.
func (p *Pool) takeProbe(ctx context.Context, h *host, opts ProbeOptions) (waited bool, err error) {
	end, waiting := noEnd, false
	for {
		h.mu.Lock()
		select {
		case h.probe <- struct{}{}:
			h.onDemand.Store(opts.OnDemand)
			h.mu.Unlock()
			end("ok")
			return waiting, nil
		default:
		}
		abandoned, heldOnDemand, freed := h.abandoned.Load(), h.onDemand.Load(), h.freed
		h.mu.Unlock()
		refuse := func() error {
			if abandoned {
				return fmt.Errorf("probe %s: %w", h.addr, ErrProbeBusy)
			}
			return fmt.Errorf("probe %s: %w", h.addr, ErrProbeRunning)
		}
		switch {
		case opts.OnDemand && abandoned, !opts.OnDemand && !heldOnDemand:
			err := refuse()
			end(err.Error())
			return waiting, err
		}
		if !waiting {
			waiting, end = true, begin(opts.Trace, "wait for the host's running check")
		}
		select {
		case <-freed:
		case <-ctx.Done():
			var err error
			if opts.OnDemand {
				err = &waitError{fmt.Sprintf("waiting for the running check of %s to finish", h.addr), context.Cause(ctx)}
			} else {
				abandoned = h.abandoned.Load()
				err = refuse()
			}
			end(err.Error())
			return waiting, err
		case <-p.closing:
			end(ErrClosed.Error())
			return waiting, ErrClosed
		}
	}
}

// releaseProbe gives h.probe back and wakes the probes waiting for it.
func (h *host) releaseProbe() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onDemand.Store(false)
	<-h.probe
	h.notifyLocked()
}

// setAbandoned marks the probe holding h.probe as abandoned and wakes the probes waiting for
// it (an on-demand probe stops waiting for a hung host).
func (h *host) setAbandoned() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.abandoned.Store(true)
	h.notifyLocked()
}

func (h *host) notifyLocked() {
	close(h.freed)
	h.freed = make(chan struct{})
}

// testHookAbandoned, when set by a test, runs in Probe between abandoning a probe and counting it.
var testHookAbandoned func()

// testHookAcquired, when set by a test, runs in Probe between acquiring the connection and
// counting the probe.
var testHookAcquired func()
