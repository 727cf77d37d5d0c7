package crdwriter

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The fencing of writes by time (the campaigns for the Lease are in campaign.go).
//
// client-go's elector says a replica leads until it has read a Lease held by someone else, or
// until its renewals have failed for the renew deadline. A replica frozen past the lease (a
// SIGSTOP, a long GC pause, a stalled VM) wakes still believing it leads, while another replica
// has taken over. So a term may write only while both hold:
//   - the elector has not observed another holder (else the term ends at once), and
//   - the last successful renewal of the Lease (the send time of the request that renewed it) is
//     younger than the renew deadline.
//
// When the renewal is overdue, nothing is written until client-go has read the Lease again and
// renewed it (a new successful renewal), or the term ends. Every write request but the Lease's
// also passes the fence at the transport, right before it is sent.

// leaseView is one term's view of the Lease.
type leaseView struct {
	// isLeader says whether the holder the elector last observed is this replica.
	isLeader func() bool
	// renewed returns when the last successful renewal was sent.
	renewed       func() time.Time
	renewDeadline time.Duration
}

// allowWrites is mayWrite as the collector of garbage and the Event recorder want it: nil
// without leader election.
func (s *session) allowWrites() func() bool {
	if s.lease == nil {
		return nil
	}
	return s.mayWrite
}

// mayWrite reports whether this term may write now; when another replica holds the Lease it
// ends the term and says no. It is asked right before every request that writes (and again by
// the transport's fence).
func (s *session) mayWrite() bool {
	if s.lease == nil {
		return true
	}
	if !s.lease.isLeader() {
		s.endTerm()
		return false
	}
	if !s.lease.fresh() {
		if s.overdue.CompareAndSwap(false, true) {
			s.w.logger.Warn("the last renewal of the lease is older than the renew deadline: writing nothing until it is renewed",
				"lease", s.w.opts.LeaseNamespace+"/"+s.w.opts.LeaseName, "renew_deadline", s.w.opts.RenewDeadline)
		}
		return false
	}
	if s.overdue.CompareAndSwap(true, false) {
		s.w.logger.Info("the lease is renewed again: writing", "lease", s.w.opts.LeaseNamespace+"/"+s.w.opts.LeaseName)
	}
	return true
}

// fresh reports whether the last renewal is younger than the renew deadline.
func (l *leaseView) fresh() bool { return l.remaining() > 0 }

// fenceAt is when the term's writes must have ended: the last renewal plus the renew deadline.
// A successor cannot take over before the lease duration has passed since it saw that renewal,
// so the margin between the two is the lease duration less the renew deadline (5s by default).
func (l *leaseView) fenceAt() time.Time { return time.Now().Add(l.remaining()) }

// remaining is how long the term may still write after the last renewal: the renew deadline
// less the time since the renewal was sent, by the monotonic clock or the wall clock, whichever
// has moved more. (Go's monotonic clock stops while the machine is suspended; the wall clock
// does not.) Zero or less: no write.
func (l *leaseView) remaining() time.Duration {
	r := l.renewed()
	if r.IsZero() {
		return 0
	}
	now := time.Now()
	elapsed := max(now.Sub(r), now.Round(0).Sub(r.Round(0)))
	return l.renewDeadline - elapsed
}

// renewalLock is the Lease lock, remembering when it was last acquired or renewed by this
// replica.
type renewalLock struct {
	resourcelock.Interface
	renewed atomic.Pointer[time.Time]
}

func (l *renewalLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, ler)
	l.note(sent, ler, err)
	return err
}

func (l *renewalLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, ler)
	l.note(sent, ler, err)
	return err
}

func (l *renewalLock) note(sent time.Time, ler resourcelock.LeaderElectionRecord, err error) {
	// A release (on cancel) writes an empty holder: that is no renewal.
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.renewed.Store(&sent)
	}
}

func (l *renewalLock) lastRenewal() time.Time {
	if t := l.renewed.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// fence refuses write requests at the transport while its gate says no. With no gate (no leader
// election) everything passes. Only the requests of leader election itself pass a closed gate:
// creating a Lease in the Lease's namespace, and writing the one Lease of this writer.
type fence struct {
	gate atomic.Pointer[func() bool]
	// until, when set, says when writes must have ended: each write that passes the gate gets
	// it as its deadline (fenceAt).
	until atomic.Pointer[func() time.Time]
	// leases is the path of the Lease collection of the Lease's namespace, lease the path of
	// this writer's Lease (both with the API server URL's own path prefix, if any).
	leases, lease string
}

// exemptLease sets the Lease whose requests pass the fence: the coordination.k8s.io/v1 Lease
// name in namespace, at the API server of host (a URL that may carry a path prefix).
func (f *fence) exemptLease(host, namespace, name string) {
	prefix := ""
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		prefix = strings.TrimSuffix(u.Path, "/")
	}
	f.leases = prefix + "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/leases"
	f.lease = f.leases + "/" + url.PathEscape(name)
}

func (f *fence) set(gate func() bool) {
	if gate == nil {
		f.gate.Store(nil)
		return
	}
	f.gate.Store(&gate)
}

// bound makes every write that passes the gate end by until() (nil: no bound but the
// request's own).
func (f *fence) bound(until func() time.Time) {
	if until == nil {
		f.until.Store(nil)
		return
	}
	f.until.Store(&until)
}

func (f *fence) wrap(rt http.RoundTripper) http.RoundTripper { return &fencedTransport{f: f, rt: rt} }

type fencedTransport struct {
	f  *fence
	rt http.RoundTripper
}

func (t *fencedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !t.f.exempt(r) {
		if g := t.f.gate.Load(); g != nil && !(*g)() {
			if r.Body != nil {
				_ = r.Body.Close()
			}
			return nil, errFenced
		}
		if u := t.f.until.Load(); u != nil {
			// A write still running at the fence would land when a successor may already
			// write: cut it there (the request's own timeout is up to 15s).
			ctx, cancel := context.WithDeadline(r.Context(), (*u)())
			resp, err := t.rt.RoundTrip(r.WithContext(ctx))
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
	}
	return t.rt.RoundTrip(r)
}

// exempt reports whether r is a request of leader election: a create of a Lease in the Lease's
// namespace (client-go names the Lease in the body) or a write of this writer's Lease.
func (f *fence) exempt(r *http.Request) bool {
	switch {
	case f.lease == "":
		return false
	case r.Method == http.MethodPost:
		return r.URL.Path == f.leases
	default:
		return r.URL.Path == f.lease
	}
}

// cancelOnClose releases a bounded request's context once its response has been read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
