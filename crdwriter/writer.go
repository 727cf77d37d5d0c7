// Package crdwriter mirrors the exporter's snapshots into ProviderHealth objects (API types in
// crdwriter/v1alpha1), one cluster-scoped object per configured provider, so that
// `kubectl get ph` answers "is it healthy, why not, since when".
//
// The writer is notified by the check runner and coalesces: it reads the newest snapshot when it
// can, never blocks the runner or a scrape, and writes a status only when something an observer
// can see changed, plus a heartbeat at most once per heartbeat interval. It reads straight from
// the API server (no informer): it remembers the objects it last read or wrote and re-reads one
// only on a conflict. Only objects labelled app.kubernetes.io/managed-by=provider-health-exporter
// are ever modified or deleted.
package crdwriter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// The writer's identity in the API server.
const (
	// FieldManager is the one field manager of every write, and the Events' source component.
	FieldManager = "provider-health-exporter"
	// ManagedByLabel marks the objects this exporter owns; objects without it are never touched.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value on our objects.
	ManagedByValue = "provider-health-exporter"
)

// Defaults of Options.
const (
	DefaultHeartbeatInterval = 5 * time.Minute
	// DefaultStaleIntervals is how many check intervals without a completed check make a
	// provider's results stale (Ready turns Unknown) when Options.StaleAfter is zero.
	DefaultStaleIntervals = 3
	DefaultLeaseName      = "provider-health-exporter"
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
)

// maxPendingEvents bounds the Events kept per provider while they cannot be written.
const maxPendingEvents = 64

// Source is where the writer gets snapshots: the check runner (*checks.Runner).
type Source interface {
	// Current returns the newest snapshot; never nil.
	Current() *checks.Snapshot
	// Subscribe returns a coalescing channel that receives a value after each new snapshot
	// and is closed when ctx ends.
	Subscribe(ctx context.Context) <-chan struct{}
}

// Options configures a Writer.
type Options struct {
	// Config reaches the API server (required).
	Config *rest.Config
	// Source provides the snapshots (required by Run, not by DeleteAll).
	Source Source
	// Logger receives the writer's logs; nil discards them.
	Logger *slog.Logger
	// Interval is the check interval; with StaleAfter zero, results older than
	// DefaultStaleIntervals intervals are stale.
	Interval time.Duration
	// StaleAfter is how old the newest check of a provider may be before its Ready condition
	// turns Unknown (ChecksStale). Zero: DefaultStaleIntervals × Interval (no staleness when
	// Interval is zero too).
	StaleAfter time.Duration
	// HeartbeatInterval is the most time between two writes of an object's status when nothing
	// changes (status.lastHeartbeatTime). Zero: DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration

	// LeaderElect makes only the holder of a coordination.k8s.io Lease write.
	LeaderElect bool
	// LeaseNamespace holds the Lease. Empty: the pod's namespace in a cluster, else "default".
	LeaseNamespace string
	// LeaseName names the Lease. Empty: DefaultLeaseName.
	LeaseName string
	// Identity is this replica's name in the Lease. Empty: the host name and a random suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (client-go's meaning).
	// Zero: DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Registerer receives the writer's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Writer mirrors snapshots into ProviderHealth objects. Create it with New, run it with Run.
type Writer struct {
	opts    Options
	logger  *slog.Logger
	objects objectClient
	core    typedcorev1.CoreV1Interface
	coord   coordinationv1client.CoordinationV1Interface
	metrics *metrics
	// newRecorder starts an Event recorder for one leadership term; it writes an Event only
	// while allow (nil: always) says so.
	newRecorder func(ctx context.Context, allow func() bool) (record.EventRecorder, func())
	// maxBackoff caps the wait between two attempts while the API server fails.
	maxBackoff time.Duration
	// afterSync, when set (by tests), is called after each attempt to sync, with the newest
	// round memory reflects and the attempt's error.
	afterSync func(round uint64, err error)

	mu           sync.Mutex
	providers    map[string]bool
	providersSet bool
	// reload is poked by SetProviders: re-observe and collect garbage.
	reload chan struct{}

	crdMissingLogged bool // guarded by mu
	// observedLeader is the current campaign's view of the Lease: whether the holder it last
	// observed is this replica (nil outside a campaign). Guarded by mu; tests read it to know
	// when the writer has seen another holder.
	observedLeader func() bool
}

// New returns a Writer. It does not contact the API server.
func New(opts Options) (*Writer, error) {
	if opts.Config == nil {
		return nil, errors.New("crdwriter: a rest.Config is required")
	}
	if opts.HeartbeatInterval < 0 || opts.StaleAfter < 0 || opts.Interval < 0 {
		return nil, errors.New("crdwriter: intervals must not be negative")
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.StaleAfter == 0 {
		opts.StaleAfter = DefaultStaleIntervals * opts.Interval
	}
	if opts.LeaseName == "" {
		opts.LeaseName = DefaultLeaseName
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = podNamespace()
	}
	if opts.Identity == "" {
		opts.Identity = defaultIdentity()
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RenewDeadline == 0 {
		opts.RenewDeadline = DefaultRenewDeadline
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	if opts.LeaderElect && (opts.LeaseDuration <= opts.RenewDeadline ||
		float64(opts.RenewDeadline) <= leaderelection.JitterFactor*float64(opts.RetryPeriod)) {
		return nil, fmt.Errorf("crdwriter: want lease duration (%s) > renew deadline (%s) > %.1f × retry period (%s)",
			opts.LeaseDuration, opts.RenewDeadline, leaderelection.JitterFactor, opts.RetryPeriod)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.UserAgent == "" {
		cfg.UserAgent = FieldManager
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("crdwriter: building the HTTP client: %w", err)
	}
	objects, err := newRESTObjects(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	core, err := typedcorev1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("crdwriter: building the core client: %w", err)
	}
	coord, err := coordinationv1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("crdwriter: building the coordination client: %w", err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("crdwriter: registering metrics: %w", err)
	}
	w := &Writer{
		opts: opts, logger: logger, objects: objects, core: core, coord: coord, metrics: m,
		maxBackoff: 30 * time.Second,
		reload:     make(chan struct{}, 1),
	}
	w.newRecorder = func(ctx context.Context, allow func() bool) (record.EventRecorder, func()) {
		return newEventRecorder(ctx, core, m, allow)
	}
	return w, nil
}

func podNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}

func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "provider-health-exporter"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}

// SetProviders sets the configured providers (after a reload): objects of ours whose provider
// is not in names are deleted. Until it is first called, the providers of the newest snapshot
// are the configured ones. Safe to call at any time, from any goroutine.
func (w *Writer) SetProviders(names []string) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	w.mu.Lock()
	w.providers, w.providersSet = set, true
	w.mu.Unlock()
	select {
	case w.reload <- struct{}{}:
	default:
	}
}

// configured returns the configured providers: SetProviders' names, else the snapshot's.
func (w *Writer) configured(snap *checks.Snapshot) map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.providersSet {
		return w.providers
	}
	set := make(map[string]bool, len(snap.Providers))
	for _, p := range snap.Providers {
		set[p.Name] = true
	}
	return set
}

// Run writes until ctx is done, then returns nil. With leader election it writes only while it
// holds the Lease; when it loses the Lease it stops writing at once and campaigns again.
func (w *Writer) Run(ctx context.Context) error {
	if w.opts.Source == nil {
		return errors.New("crdwriter: Options.Source is required to run")
	}
	// client-go logs through klog; send what it says about this writer to our logger.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(w.logger.Handler()))
	if !w.opts.LeaderElect {
		w.metrics.leader.Set(1)
		defer w.metrics.leader.Set(0)
		w.lead(ctx, nil)
		return nil
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, w.opts.LeaseNamespace, w.opts.LeaseName,
		w.core, w.coord, resourcelock.ResourceLockConfig{Identity: w.opts.Identity})
	if err != nil {
		return fmt.Errorf("crdwriter: lease lock: %w", err)
	}
	for ctx.Err() == nil {
		if err := w.campaign(ctx, lock); err != nil {
			return err
		}
		if ctx.Err() == nil {
			w.logger.Warn("lost the lease, stopped writing ProviderHealth objects; campaigning again",
				"lease", w.opts.LeaseNamespace+"/"+w.opts.LeaseName, "identity", w.opts.Identity)
		}
	}
	return nil
}

// campaign runs one leader election: waits for the lease, writes while holding it, and returns
// once it is lost (or ctx is done) and every write of this term has stopped.
func (w *Writer) campaign(ctx context.Context, lock resourcelock.Interface) error {
	var (
		mu       sync.Mutex
		over     bool
		active   bool
		finished = make(chan struct{})
		le       *leaderelection.LeaderElector
		err      error
	)
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   w.opts.LeaseDuration,
		RenewDeadline:   w.opts.RenewDeadline,
		RetryPeriod:     w.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            w.opts.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if over {
					mu.Unlock()
					return
				}
				active = true
				mu.Unlock()
				defer close(finished)
				w.logger.Info("acquired the lease, writing ProviderHealth objects", "identity", w.opts.Identity)
				w.metrics.leader.Set(1)
				defer w.metrics.leader.Set(0)
				// client-go keeps renewing for up to the renew deadline after it has seen
				// another holder, and cancels lctx only then: the term checks the observed
				// holder itself before every write.
				w.lead(lctx, le.IsLeader)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("crdwriter: leader election: %w", err)
	}
	w.mu.Lock()
	w.observedLeader = le.IsLeader
	w.mu.Unlock()
	le.Run(ctx)
	// The term's context is cancelled once Run returns; wait until its writes have stopped so
	// that two terms never overlap.
	mu.Lock()
	over = true
	wasActive := active
	mu.Unlock()
	if wasActive {
		<-finished
	}
	return nil
}

// DeleteAll deletes every object of ours (checks turned off), retrying with backoff while the
// API server fails, until done or ctx ends. Objects without our label are left alone. It must
// not run concurrently with Run.
func (w *Writer) DeleteAll(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		_, err := w.gcList(ctx, func(string) bool { return false }, false, nil)
		if errors.Is(err, errCRDMissing) {
			w.logger.Info("the ProviderHealth CRD is not installed: no object to delete")
			return nil
		}
		if err == nil {
			return nil
		}
		w.logger.Warn("deleting ProviderHealth objects failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("crdwriter: deleting ProviderHealth objects: %w", ctx.Err())
		case <-time.After(w.backoff(attempt)):
		}
	}
}

var (
	errCRDMissing = errors.New("the ProviderHealth CRD is not installed")
	errNotOurs    = errors.New("object exists without our managed-by label")
	errNotLeader  = errors.New("another replica holds the lease")
)

var ourSelector = ManagedByLabel + "=" + ManagedByValue

func ours(obj *v1alpha1.ProviderHealth) bool { return obj.Labels[ManagedByLabel] == ManagedByValue }

// gcList deletes our objects whose provider keep rejects, and returns the rest. logMissing
// logs (once) that the CRD is missing. allow (nil: always) is asked before each delete; when it
// says no, gcList stops with errNotLeader.
func (w *Writer) gcList(ctx context.Context, keep func(string) bool, logMissing bool, allow func() bool) ([]v1alpha1.ProviderHealth, error) {
	items, err := w.objects.List(ctx, ourSelector)
	if err != nil {
		if apierrors.IsNotFound(err) {
			if logMissing {
				w.crdMissing()
			}
			return nil, errCRDMissing
		}
		return nil, fmt.Errorf("listing ProviderHealth objects: %w", err)
	}
	w.crdPresent()
	var kept []v1alpha1.ProviderHealth
	var errs []error
	for i := range items {
		obj := &items[i]
		if !ours(obj) { // the selector says it is; never trust a filter with a delete
			continue
		}
		if keep(obj.Name) {
			kept = append(kept, *obj)
			continue
		}
		if allow != nil && !allow() {
			return nil, errNotLeader
		}
		err := w.objects.Delete(ctx, obj.Name, obj.UID)
		switch {
		case err == nil:
			w.metrics.count(writeDelete, nil)
			w.logger.Info("deleted ProviderHealth of a provider no longer configured", "provider", obj.Name)
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err): // replaced by someone since the list: not the object we meant
			w.metrics.count(writeDelete, err)
		default:
			w.metrics.count(writeDelete, err)
			errs = append(errs, fmt.Errorf("deleting ProviderHealth %s: %w", obj.Name, err))
		}
	}
	return kept, errors.Join(errs...)
}

func (w *Writer) crdMissing() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.crdMissingLogged {
		w.crdMissingLogged = true
		w.logger.Error("the ProviderHealth CRD is not installed: apply it with `kubectl apply -f deploy/crd/`; metrics are still served and the writer keeps retrying",
			"crd", v1alpha1.Resource+"."+v1alpha1.GroupName)
	}
}

func (w *Writer) crdPresent() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.crdMissingLogged {
		w.crdMissingLogged = false
		w.logger.Info("the ProviderHealth CRD is installed now")
	}
}

// backoff is the wait before retry attempt n (from 0): exponential from 1s, capped, jittered.
func (w *Writer) backoff(n int) time.Duration {
	d := time.Duration(float64(time.Second) * math.Pow(2, float64(min(n, 16))))
	d = min(d, w.maxBackoff)
	return d - time.Duration(mathrand.Int64N(int64(d)/5+1))
}

// session is one term of writing (the whole of Run without leader election): what the writer
// knows of the objects and the providers, rebuilt from the live objects at each term's start.
type session struct {
	w        *Writer
	recorder record.EventRecorder
	// isLeader says whether the Lease's holder last observed is this replica (nil without
	// leader election); endTerm stops the term's work.
	isLeader func() bool
	endTerm  func()

	mu      sync.Mutex // guards mem, pending and round
	mem     map[string]*providerMem
	pending map[string][]targetEvent
	seq     uint64 // numbers pending Events
	round   uint64
	// gcWanted is set when a provider left the configured set without SetProviders (the
	// snapshot's providers are the configured ones): its object is garbage now.
	gcWanted bool
	dirty    chan struct{}

	// Owned by the syncing goroutine.
	live    map[string]*v1alpha1.ProviderHealth
	foreign map[string]time.Time // objects of our providers' names without our label: when last seen
}

// lead writes until ctx is done or, with isLeader set (leader election), until isLeader says
// another replica holds the Lease: from then on it makes no write.
func (w *Writer) lead(ctx context.Context, isLeader func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	s := &session{
		w: w, isLeader: isLeader,
		endTerm: func() {
			once.Do(func() {
				w.logger.Warn("another replica holds the lease now; stopped writing ProviderHealth objects",
					"lease", w.opts.LeaseNamespace+"/"+w.opts.LeaseName, "identity", w.opts.Identity)
				cancel()
			})
		},
		mem:     make(map[string]*providerMem),
		pending: make(map[string][]targetEvent),
		dirty:   make(chan struct{}, 1),
		live:    make(map[string]*v1alpha1.ProviderHealth),
		foreign: make(map[string]time.Time),
	}
	recorder, stop := w.newRecorder(ctx, s.allowWrites())
	defer stop()
	s.recorder = recorder
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait: the term's goroutines end with ctx
	if isLeader != nil {
		// End the term as soon as another holder is observed, not only at the next write, so
		// that the leader metric and the next campaign do not wait for client-go's deadline.
		wg.Go(func() { s.followLease(ctx) })
	}
	if !s.seed(ctx) {
		return
	}
	wg.Go(func() { s.watch(ctx) })
	s.syncLoop(ctx)
}

// mayWrite reports whether this term may write; when another replica holds the Lease it ends
// the term and says no. It is asked right before every request that writes.
func (s *session) mayWrite() bool {
	if s.isLeader == nil || s.isLeader() {
		return true
	}
	s.endTerm()
	return false
}

// followLease ends the term once the elector has observed another holder of the Lease.
func (s *session) followLease(ctx context.Context) {
	t := time.NewTicker(max(s.w.opts.RetryPeriod/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !s.mayWrite() {
				return
			}
		}
	}
}

// allowWrites is mayWrite as gcList and the Event recorder want it: nil without leader election.
func (s *session) allowWrites() func() bool {
	if s.isLeader == nil {
		return nil
	}
	return s.mayWrite
}

// seed lists our objects, deletes the garbage and remembers the rest (their transition times
// above all), retrying until it succeeds or ctx ends.
func (s *session) seed(ctx context.Context) bool {
	for attempt := 0; ; attempt++ {
		configured := s.w.configured(s.w.opts.Source.Current())
		kept, err := s.w.gcList(ctx, func(n string) bool { return configured[n] }, true, s.allowWrites())
		if err == nil {
			for i := range kept {
				obj := kept[i]
				s.live[obj.Name] = &obj
				s.mem[obj.Name] = memFromStatus(&obj.Status)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !errors.Is(err, errCRDMissing) {
			s.w.logger.Warn("reading ProviderHealth objects failed; retrying", "err", err, "attempt", attempt+1)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(s.w.backoff(attempt)):
		}
	}
}

// watch folds every new snapshot into memory, and re-evaluates staleness when it is due, without
// ever waiting for the API server.
func (s *session) watch(ctx context.Context) {
	notify := s.w.opts.Source.Subscribe(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.observe()
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0) + 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-notify:
			if !ok {
				return
			}
		case <-timer.C:
		}
	}
}

// observe folds the newest snapshot into memory, pokes the syncer, and returns when a provider
// will turn stale (zero: never).
func (s *session) observe() time.Time {
	snap := s.w.opts.Source.Current()
	configured := s.w.configured(snap)
	now := time.Now()
	staleAfter := s.w.opts.StaleAfter
	var next time.Time
	s.mu.Lock()
	s.round = snap.Round
	for i := range snap.Providers {
		ps := &snap.Providers[i]
		if !configured[ps.Name] {
			continue
		}
		m := s.mem[ps.Name]
		if m == nil {
			m = &providerMem{}
			s.mem[ps.Name] = m
		}
		events := m.observe(ps, now, staleAfter)
		for i := range events {
			s.seq++
			events[i].seq = s.seq
		}
		if len(events) > 0 {
			q := append(s.pending[ps.Name], events...)
			if drop := len(q) - maxPendingEvents; drop > 0 {
				q = q[drop:]
			}
			s.pending[ps.Name] = q
		}
		if staleAfter > 0 && !m.lastChecked.IsZero() {
			if at := m.lastChecked.Add(staleAfter); at.After(now) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	for name := range s.mem {
		if !configured[name] {
			delete(s.mem, name)
			delete(s.pending, name)
			s.gcWanted = true
		}
	}
	s.mu.Unlock()
	select {
	case s.dirty <- struct{}{}:
	default:
	}
	return next
}

// syncLoop writes what memory says whenever it changes, a heartbeat is due or a reload asks for
// garbage collection; while the API server fails it retries with backoff.
func (s *session) syncLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	var retryAt time.Time
	gcNeeded := false
	for {
		wake := s.nextHeartbeat()
		if failures > 0 {
			wake = retryAt
		}
		timer.Reset(max(time.Until(wake), 0))
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		case <-timer.C:
		case <-s.w.reload:
			gcNeeded = true
			s.observe()
		}
		if failures > 0 && time.Now().Before(retryAt) {
			continue // a change while the API server fails waits for the next attempt
		}
		s.mu.Lock()
		round := s.round
		if s.gcWanted {
			gcNeeded, s.gcWanted = true, false
		}
		s.mu.Unlock()
		err := s.syncOnce(ctx, gcNeeded)
		if ctx.Err() != nil {
			return
		}
		if s.w.afterSync != nil {
			s.w.afterSync(round, err)
		}
		if err == nil {
			if failures > 0 {
				s.w.logger.Info("writing ProviderHealth objects works again")
			}
			failures, gcNeeded = 0, false
			continue
		}
		if failures == 0 && !errors.Is(err, errCRDMissing) {
			s.w.logger.Warn("writing ProviderHealth objects failed; retrying with backoff", "err", err)
		} else {
			s.w.logger.Debug("writing ProviderHealth objects failed again", "err", err)
		}
		retryAt = time.Now().Add(s.w.backoff(failures))
		failures++
	}
}

// nextHeartbeat returns when the next heartbeat (or re-check of a foreign object) is due.
func (s *session) nextHeartbeat() time.Time {
	next := time.Now().Add(s.w.opts.HeartbeatInterval)
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, obj := range s.live {
		if m := s.mem[name]; m == nil || m.lastChecked.IsZero() {
			continue // no heartbeat for it (see syncProvider)
		}
		if hb := obj.Status.LastHeartbeatTime; hb != nil {
			if at := hb.Add(s.w.opts.HeartbeatInterval); at.Before(next) {
				next = at
			}
		}
	}
	for _, seen := range s.foreign {
		if at := seen.Add(s.w.opts.HeartbeatInterval); at.Before(next) {
			next = at
		}
	}
	return next
}

// syncOnce collects garbage when asked, then brings every provider's object up to date. It
// stops at the first failure that is not about one object (the API server is unreachable).
func (s *session) syncOnce(ctx context.Context, gc bool) error {
	if gc {
		configured := s.w.configured(s.w.opts.Source.Current())
		kept, err := s.w.gcList(ctx, func(n string) bool { return configured[n] }, true, s.allowWrites())
		if err != nil {
			return err
		}
		for name := range s.live {
			if !configured[name] {
				delete(s.live, name)
			}
		}
		for name := range s.foreign {
			if !configured[name] {
				delete(s.foreign, name)
			}
		}
		for i := range kept {
			obj := kept[i]
			if cur := s.live[obj.Name]; cur == nil || cur.UID != obj.UID || cur.ResourceVersion != obj.ResourceVersion {
				s.live[obj.Name] = &obj
			}
		}
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.mem))
	for name := range s.mem {
		names = append(names, name)
	}
	s.mu.Unlock()
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		err := s.syncProvider(ctx, name)
		if err == nil {
			continue
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) || errors.Is(err, errCRDMissing) {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncProvider writes one provider's status when it differs visibly from the live object's or a
// heartbeat is due, creating the object when missing; then it records the provider's Events.
func (s *session) syncProvider(ctx context.Context, name string) error {
	s.mu.Lock()
	m := s.mem[name]
	if m == nil {
		s.mu.Unlock()
		return nil
	}
	desired := m.render()
	// Until this writer has seen a check of the provider, a heartbeat would vouch for
	// verdicts read back from the object (a restart): write only a visible change.
	checked := !m.lastChecked.IsZero()
	events := slices.Clone(s.pending[name])
	s.mu.Unlock()

	logger := s.w.logger.With("provider", name)
	if seen, ok := s.foreign[name]; ok {
		if time.Since(seen) < s.w.opts.HeartbeatInterval {
			return nil
		}
		delete(s.foreign, name)
		delete(s.live, name)
	}
	live := s.live[name]
	for attempt := 0; attempt < 5; attempt++ {
		if live == nil {
			obj, err := s.create(ctx, name)
			if errors.Is(err, errNotOurs) {
				logger.Warn("a ProviderHealth object of this name exists without our label; leaving it alone",
					"label", ourSelector)
				s.foreign[name] = time.Now()
				return nil
			}
			if err != nil {
				return err
			}
			live = obj
			s.live[name] = obj
		}
		now := time.Now()
		hb := live.Status.LastHeartbeatTime
		heartbeatDue := checked && (hb == nil || now.Sub(hb.Time) >= s.w.opts.HeartbeatInterval)
		if sameVisible(&live.Status, &desired) && !heartbeatDue {
			s.emit(name, live, events)
			return nil
		}
		if !s.mayWrite() {
			return errNotLeader
		}
		obj := live.DeepCopy()
		obj.Status = desired
		obj.Status.LastHeartbeatTime = &metav1.Time{Time: now.Truncate(time.Second)}
		updated, err := s.w.objects.UpdateStatus(ctx, obj)
		s.w.metrics.count(writeStatus, err)
		switch {
		case err == nil:
			s.live[name] = updated
			s.emit(name, updated, events)
			return nil
		case apierrors.IsConflict(err):
			got, gerr := s.w.objects.Get(ctx, name)
			switch {
			case apierrors.IsNotFound(gerr):
				live = nil
			case gerr != nil:
				return fmt.Errorf("re-reading ProviderHealth %s after a conflict: %w", name, gerr)
			case !ours(got):
				logger.Warn("the ProviderHealth object was replaced by one without our label; leaving it alone")
				delete(s.live, name)
				s.foreign[name] = time.Now()
				return nil
			default:
				live = got
				s.live[name] = got
			}
		case apierrors.IsNotFound(err):
			// Deleted by someone: recreate it, with the transition times memory kept.
			logger.Info("the ProviderHealth object was deleted; recreating it")
			delete(s.live, name)
			live = nil
		default:
			return fmt.Errorf("writing the status of ProviderHealth %s: %w", name, err)
		}
	}
	return fmt.Errorf("writing the status of ProviderHealth %s: still conflicting after 5 attempts", name)
}

// create creates the provider's object (no status: the API server ignores it on create), or
// returns the existing one when it is ours.
func (s *session) create(ctx context.Context, name string) (*v1alpha1.ProviderHealth, error) {
	obj := &v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{ManagedByLabel: ManagedByValue},
	}}
	if !s.mayWrite() {
		return nil, errNotLeader
	}
	created, err := s.w.objects.Create(ctx, obj)
	s.w.metrics.count(writeCreate, err)
	switch {
	case err == nil:
		s.w.logger.Info("created ProviderHealth", "provider", name)
		return created, nil
	case apierrors.IsAlreadyExists(err):
		got, gerr := s.w.objects.Get(ctx, name)
		if gerr != nil {
			return nil, fmt.Errorf("reading ProviderHealth %s: %w", name, gerr)
		}
		if !ours(got) {
			return nil, errNotOurs
		}
		return got, nil
	case apierrors.IsNotFound(err):
		s.w.crdMissing()
		return nil, errCRDMissing
	default:
		return nil, fmt.Errorf("creating ProviderHealth %s: %w", name, err)
	}
}

// emit records the provider's pending Events on its object and forgets them.
func (s *session) emit(name string, obj *v1alpha1.ProviderHealth, events []targetEvent) {
	if len(events) == 0 {
		return
	}
	for _, e := range events {
		if !s.mayWrite() {
			return
		}
		s.recorder.Event(obj, e.eventType, e.reason, e.message)
	}
	last := events[len(events)-1].seq
	s.mu.Lock()
	defer s.mu.Unlock()
	// Events queued meanwhile stay for the next write; drop what was just recorded.
	s.pending[name] = slices.DeleteFunc(s.pending[name], func(e targetEvent) bool { return e.seq <= last })
}
