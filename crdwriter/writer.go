// Package crdwriter mirrors the exporter's snapshots into ProviderHealth objects (API types in
// crdwriter/v1alpha1), one cluster-scoped object per configured provider, so that
// `kubectl get ph` answers "is it healthy, why not, since when".
//
// The writer is notified by the check runner and coalesces: it reads the newest snapshot when it
// can, never blocks the runner or a scrape, and writes a status only when something an observer
// can see changed, plus a heartbeat at most once per heartbeat interval. It reads straight from
// the API server (no informer): it remembers the objects it last read or wrote and re-reads one
// only on a conflict.
//
// Each exporter deployment has an identity: its instance (Options.Instance), stored in the label
// providerhealth.io/instance, and its Lease's namespace and name, stored in the annotation
// providerhealth.io/deployment of the objects it creates. A writer modifies or deletes only
// objects labelled app.kubernetes.io/managed-by=provider-health-exporter that carry both its
// instance and its deployment; an object of a provider's name that belongs to anyone else is a
// name clash, reported and left alone.
//
// Where to find what, from the top down (a file uses only what it or the files after it
// declare): writer.go (options, construction, Run,
// DeleteAll), campaign.go (leader election), session.go (one term of writing: seeding and
// folding snapshots into memory), sync.go (the sync loop and its backoff), write.go (one
// provider's write), rejections.go and compare.go (what the API server refused or changed),
// ownership.go (which objects are ours, garbage collection, name clashes), status.go (the
// status a provider's object should have), report.go (what the status page shows), events.go,
// metrics.go, lease.go (the fencing of writes by time, whether a term may write now), client.go
// (the REST client), errors.go.
package crdwriter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/internal/incluster"
)

// Defaults of Options.
const (
	// DefaultInstance is the instance of a writer whose Options.Instance is empty.
	DefaultInstance          = "provider-health-exporter"
	DefaultHeartbeatInterval = 5 * time.Minute
	// DefaultStaleIntervals is how many check intervals without a completed check make a
	// provider's results stale (Ready turns Unknown) when Options.StaleAfter is zero.
	DefaultStaleIntervals  = 3
	DefaultLeaseDuration   = 15 * time.Second
	DefaultRenewDeadline   = 10 * time.Second
	DefaultRetryPeriod     = 2 * time.Second
	DefaultMaxRetryBackoff = 30 * time.Second
	// DefaultMinReasonInterval is the least time between two writes of an object whose only
	// change is a reason (targets that stay down with another reason; the Ready condition's
	// reason and messages).
	DefaultMinReasonInterval = 2 * time.Minute
)

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
	// Instance names this exporter deployment: its objects carry it in InstanceLabel, and it
	// never modifies or deletes another instance's objects. Empty: DefaultInstance. It must be
	// a valid label value.
	Instance string
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
	// MinReasonInterval is the least time between two writes of an object when the only change
	// is a reason: no target flipped up or down, the targets and counts are the same. Such a
	// change waits until that long after the object's last write (or its heartbeat, if that
	// comes first), so targets whose reasons alternate every round cannot make the writer
	// rewrite every object every round. Zero: DefaultMinReasonInterval; negative: none.
	MinReasonInterval time.Duration
	// MaxRetryBackoff caps the wait between two attempts while the API server fails (the wait
	// starts at a second and doubles). Zero: DefaultMaxRetryBackoff.
	MaxRetryBackoff time.Duration

	// LeaderElect makes only the holder of a coordination.k8s.io Lease write.
	LeaderElect bool
	// LeaseNamespace holds the Lease. Empty: the pod's namespace in a cluster, else "default".
	// With LeaseName it is the deployment's identity (DeploymentAnnotation), with or without
	// leader election.
	LeaseNamespace string
	// LeaseName names the Lease. Empty: the instance.
	LeaseName string
	// Identity is this replica's name in the Lease. Empty: the host name and a random suffix.
	Identity string
	// HolderPod is the pod this replica runs in (nil: none, or unknown). While this replica
	// holds the Lease, that pod owns it (an ownerReference), so the garbage collector deletes
	// the Lease once the pod is gone and nobody took it over: an uninstall leaves no Lease
	// behind even when the holder's own release of it is refused. Ignored, with a warning,
	// when the pod is in another namespace than the Lease (an owner must be in its dependent's).
	HolderPod *PodRef
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (client-go's meaning).
	// Zero: DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod. No write leaves a
	// replica whose last successful renewal is older than RenewDeadline.
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
	// newRecorder starts an Event recorder for one term; it writes an Event only while allow
	// (nil: always) says so.
	newRecorder func(ctx context.Context, allow func() bool) (record.EventRecorder, func())
	// fence refuses, at the transport, every write request but the Lease's while a term may
	// not write (see lease.go).
	fence fence
	// crdMissingLogged is owned by the goroutine running Run or DeleteAll.
	crdMissingLogged bool
	// checksOff is set while RunChecksOff or DeleteAll runs.
	checksOff *checksOff
	// deployment is this deployment's identity, the value of DeploymentAnnotation on its
	// objects: the Lease's namespace and name.
	deployment string
	// writerID names this process in the status it writes (v1alpha1.ProviderHealthStatus.Writer):
	// its host and a random suffix drawn in New.
	writerID string
	// passes counts the sync loop's passes (each wake-up that may write): tests read it to
	// tell a loop that waits from one that spins.
	passes atomic.Int64
	// report is what Report returns, published by the term's sync loop (report.go).
	report report
}

// New returns a Writer. It does not contact the API server.
func New(opts Options) (*Writer, error) {
	if opts.Config == nil {
		return nil, errors.New("crdwriter: a rest.Config is required")
	}
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	w := &Writer{opts: opts, logger: opts.Logger, deployment: opts.LeaseNamespace + "/" + opts.LeaseName, writerID: defaultIdentity()}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.UserAgent == "" {
		cfg.UserAgent = FieldManager
	}
	w.fence.exemptLease(cfg.Host, opts.LeaseNamespace, opts.LeaseName)
	cfg.Wrap(w.fence.wrap)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("crdwriter: building the HTTP client: %w", err)
	}
	if w.objects, err = newRESTObjects(cfg, httpClient); err != nil {
		return nil, err
	}
	if w.core, err = typedcorev1.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("crdwriter: building the core client: %w", err)
	}
	if w.coord, err = coordinationv1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("crdwriter: building the coordination client: %w", err)
	}
	if w.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("crdwriter: registering metrics: %w", err)
	}
	w.newRecorder = func(ctx context.Context, allow func() bool) (record.EventRecorder, func()) {
		return newEventRecorder(ctx, w.core, w.metrics, allow)
	}
	return w, nil
}

// defaults validates the options and fills in the defaults.
func (o *Options) defaults() error {
	if o.HeartbeatInterval < 0 || o.StaleAfter < 0 || o.Interval < 0 || o.MaxRetryBackoff < 0 {
		return errors.New("crdwriter: intervals must not be negative")
	}
	if o.Instance == "" {
		o.Instance = DefaultInstance
	}
	if errs := validation.IsValidLabelValue(o.Instance); len(errs) > 0 {
		return fmt.Errorf("crdwriter: instance %q is not a valid label value: %s", o.Instance, strings.Join(errs, "; "))
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = DefaultStaleIntervals * o.Interval
	}
	if o.MinReasonInterval == 0 {
		o.MinReasonInterval = DefaultMinReasonInterval
	}
	if o.MaxRetryBackoff == 0 {
		o.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if o.LeaseName == "" {
		o.LeaseName = o.Instance
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = incluster.PodNamespace()
	}
	if o.Identity == "" {
		o.Identity = defaultIdentity()
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.LeaderElect && (o.LeaseDuration <= o.RenewDeadline ||
		float64(o.RenewDeadline) <= leaderelection.JitterFactor*float64(o.RetryPeriod)) {
		return fmt.Errorf("crdwriter: want lease duration (%s) > renew deadline (%s) > %.1f × retry period (%s)",
			o.LeaseDuration, o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HolderPod != nil && o.HolderPod.Namespace != o.LeaseNamespace {
		o.Logger.Warn("the lease is in another namespace than this pod: it cannot be owned by the pod, and may stay behind when the deployment is deleted",
			"lease", o.LeaseNamespace+"/"+o.LeaseName, "pod", o.HolderPod.Namespace+"/"+o.HolderPod.Name)
		o.HolderPod = nil
	}
	return nil
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

// RunChecksOff is Run with checks turned off: there is nothing to mirror, and every object of
// this instance is garbage. It deletes them, with leader election only while holding the Lease
// and behind the same fence as every write, and keeps collecting garbage once per heartbeat
// interval until ctx is done (during a rollout an old replica, or an old version without leader
// election, may recreate objects after the first pass). Objects of other instances and objects
// without our label are left alone. It must not run concurrently with Run.
func (w *Writer) RunChecksOff(ctx context.Context) error {
	return w.runChecksOff(ctx, nil)
}

// DeleteAll deletes every object of this instance once, as RunChecksOff does (with leader
// election: once it holds the Lease), and returns when that is done or ctx ends.
func (w *Writer) DeleteAll(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var collected atomic.Bool
	err := w.runChecksOff(ctx, func() {
		collected.Store(true)
		cancel()
	})
	switch {
	case collected.Load():
		return nil
	case err != nil:
		return err
	default:
		return fmt.Errorf("crdwriter: deleting ProviderHealth objects: %w", ctx.Err())
	}
}

func (w *Writer) runChecksOff(ctx context.Context, collected func()) error {
	w.checksOff = &checksOff{collected: collected}
	defer func() { w.checksOff = nil }()
	src := w.opts.Source
	w.opts.Source = noProviders{}
	defer func() { w.opts.Source = src }()
	return w.Run(ctx)
}

// Run writes until ctx is done, then returns nil. The configured providers are those of the
// newest snapshot: a reload publishes a snapshot without a removed provider, and its object is
// deleted. With leader election it writes only while it holds the Lease; when it loses the Lease
// it stops writing at once and campaigns again.
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
	return w.campaigns(ctx)
}

// checksOff is the state of a writer run with checks off.
type checksOff struct {
	// collected (nil: nothing) is called after each complete pass of garbage collection.
	collected func()
}

// noProviders is the Source of a writer with checks off: a snapshot without providers.
type noProviders struct{}

var emptySnapshot = &checks.Snapshot{}

func (noProviders) Current() *checks.Snapshot { return emptySnapshot }

func (noProviders) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}
