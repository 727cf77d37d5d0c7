// Command provider_health_exporter checks, on a schedule, every infrastructure provider a platform
// depends on, of the provider types of this build (package providers lists them), and serves the
// cached verdicts as Prometheus metrics, a status page and readiness endpoints.
//
// This file holds the command line (flags, their validation, --config.check) and the process's
// life: start, signals, shutdown. The HTTP endpoints, the status page, reloading and the
// construction of checkers from the providers file live in package exporter.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
	"github.com/provider-health-exporter/provider-health-exporter/membership"
	// The provider types of this build.
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

const (
	programName = "provider_health_exporter"
	// defaultListenAddress: 9847 is not the port of any widely deployed exporter we know of.
	// The range the Prometheus default-port-allocations list hands out (9100-9999) is fully
	// taken, so the port is not registered there: where it clashes, --web.listen-address moves it.
	defaultListenAddress = ":9847"

	// minInterval is the shortest --provider-check-interval other than 0 (checks off): a
	// shorter one would put load on the providers for no gain in alerting.
	minInterval = 10 * time.Second
	// maxDerivedTimeout caps the timeout derived when --provider-check-timeout is 0.
	maxDerivedTimeout = exporter.MaxDerivedTimeout
	// shutdownTimeout bounds the whole exit after SIGTERM or SIGINT: the runner and the
	// ProviderHealth writer stopping, the checkers closing and in-flight HTTP requests
	// finishing. Whatever is still running then (a read of a file that does not return) is
	// left behind.
	shutdownTimeout = 10 * time.Second

	// The size flags' bounds: below minFileSize no providers file fits, above maxFileSize a
	// file would be parsed in memory at many times its size.
	minFileSize = 1 << 10
	maxFileSize = 1 << 30
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, signals))
}

// klogOnce guards the process-wide klog logger (run may be called more than once by tests).
var klogOnce sync.Once

// options are the parsed command line.
type options struct {
	configFile  string
	configCheck bool
	interval    time.Duration
	// timeout as given; 0 means derived (see checkTiming).
	timeout time.Duration
	web     *web.FlagConfig
	// externalURL and routePrefix as given (--web.external-url, --web.route-prefix); paths
	// holds what they mean once parsed.
	externalURL, routePrefix string
	paths                    webPaths
	log                      *promslog.Config
	crd                      crdOptions
	shard                    shardOptions

	// enableLifecycle turns on POST /-/reload (--web.enable-lifecycle).
	enableLifecycle bool
	// probeMinInterval is how long an on-demand check's answer serves /probe
	// (--web.probe-min-interval).
	probeMinInterval time.Duration
	// autoReload reloads the providers file before a round when it changed (--config.auto-reload).
	autoReload bool
	// writeTimeout and idleTimeout bound an answer's writing and a kept-alive connection's
	// wait (--web.write-timeout, 0: derived; --web.idle-timeout); see newHTTPServer.
	writeTimeout, idleTimeout time.Duration
	// limits bound the reads of the providers file and of the host files
	// (--config.max-size, --config.host-file-max-size).
	limits config.Limits
	// autoMemLimit and memLimitRatio: --auto-gomemlimit, --auto-gomemlimit.ratio.
	autoMemLimit  bool
	memLimitRatio float64
}

// crdOptions are the --crd.* flags: mirroring the verdicts into ProviderHealth objects.
type crdOptions struct {
	enabled           bool
	kubeconfig        string
	instance          string
	heartbeatInterval time.Duration
	minReasonInterval time.Duration
	leaderElect       bool
	leaseNamespace    string
	leaseName         string
}

// shardOptions are the --shard.* flags: sharing the targets between replicas.
type shardOptions struct {
	enabled        bool
	identity       string
	leaseNamespace string
	kubeconfig     string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
}

// parseFlags parses args. When done is true the process must exit with code at once: the
// arguments were wrong, or --help or --version has been answered.
func parseFlags(args []string, stdout, stderr io.Writer) (opts *options, code int, done bool) {
	opts = &options{log: &promslog.Config{Writer: stderr}}
	app := kingpin.New(programName, "Checks infrastructure providers on a schedule and exports the verdicts as Prometheus metrics.")
	app.Version(version.Print(programName))
	app.HelpFlag.Short('h')
	app.UsageWriter(stdout)
	app.ErrorWriter(stderr)
	// kingpin exits the process for --help and --version by default; run must return instead,
	// so that deferred cleanup runs and tests can call it.
	exited, exitCode := false, 0
	app.Terminate(func(c int) {
		if !exited {
			exited, exitCode = true, c
		}
	})

	app.Flag("config.file", "Path of the providers file.").Default("providers.yml").StringVar(&opts.configFile)
	app.Flag("config.auto-reload", "Before each round, reload the providers file when it changed on disk (as SIGHUP does; a bad file keeps the running providers and is tried again once it changes).").BoolVar(&opts.autoReload)
	app.Flag(config.FlagMaxSize, "Largest providers file read (a larger one is refused, as are a named pipe, socket or device); units B, KiB, MiB, GiB.").Default(fileread.FormatSize(config.DefaultLimits.MaxSize)).SetValue(sizeValue{config.FlagMaxSize, &opts.limits.MaxSize})
	app.Flag(config.FlagMaxTargets, "Most targets one host file lists, and one provider's host files together: a larger file is refused (its provider keeps the hosts of its last good read), a file that would take its provider past it is left out.").Default(strconv.Itoa(config.DefaultLimits.MaxTargets)).IntVar(&opts.limits.MaxTargets)
	app.Flag(config.FlagTargetFileMaxSize, "Largest host file (a kvm provider's hostFiles) read; a larger one is refused and the provider keeps the hosts of its last good read; units B, KiB, MiB, GiB.").Default(fileread.FormatSize(config.DefaultLimits.TargetFileMaxSize)).SetValue(sizeValue{config.FlagTargetFileMaxSize, &opts.limits.TargetFileMaxSize})
	app.Flag("config.check", "Validate the flags and the providers file, print what is wrong or \"ok\", and exit (1 or 0).").BoolVar(&opts.configCheck)
	app.Flag("provider-check-interval", "How often every provider is checked. 0 turns checks off; otherwise at least 10s.").Default("1m").SetValue(durationValue{"provider-check-interval", &opts.interval})
	app.Flag("provider-check-timeout", "Deadline of one round of checks. 0 derives min(15s, interval); otherwise at most the interval.").Default("0").SetValue(durationValue{"provider-check-timeout", &opts.timeout})
	app.Flag("crd.enabled", "Mirror the verdicts into cluster-scoped ProviderHealth objects (kubectl get ph).").BoolVar(&opts.crd.enabled)
	app.Flag("crd.kubeconfig", "Kubeconfig of the cluster that holds the ProviderHealth objects; empty: in-cluster config.").StringVar(&opts.crd.kubeconfig)
	app.Flag("crd.instance", "This deployment's identity among the exporters writing to the cluster: its ProviderHealth objects carry it in the label "+crdwriter.InstanceLabel+", and it never writes, takes over or deletes another instance's objects.").Default(crdwriter.DefaultInstance).StringVar(&opts.crd.instance)
	app.Flag("crd.heartbeat-interval", "Most time between two status writes of an unchanged ProviderHealth (its lastHeartbeatTime).").Default(model.Duration(crdwriter.DefaultHeartbeatInterval).String()).SetValue(durationValue{"crd.heartbeat-interval", &opts.crd.heartbeatInterval})
	app.Flag("crd.min-reason-interval", "Least time between two status writes of a ProviderHealth whose only change is a reason (no target flipped up or down); 0: none.").Default(model.Duration(crdwriter.DefaultMinReasonInterval).String()).SetValue(durationValue{"crd.min-reason-interval", &opts.crd.minReasonInterval})
	app.Flag("crd.leader-elect", "Write only while holding a coordination.k8s.io Lease, so that one of several replicas writes.").BoolVar(&opts.crd.leaderElect)
	app.Flag("crd.lease-namespace", "Namespace of the Lease; empty: the pod's namespace in a cluster, else default.").StringVar(&opts.crd.leaseNamespace)
	app.Flag("crd.lease-name", "Name of the Lease; empty: the instance (--crd.instance).").StringVar(&opts.crd.leaseName)
	app.Flag("shard.enabled", "Share the targets between the replicas of this instance (--crd.instance): each replica holds a coordination.k8s.io Lease, and checks and reports only the targets it owns among the replicas whose Leases are live.").BoolVar(&opts.shard.enabled)
	app.Flag("shard.identity", "This replica's name among the shard's members, and the name of its Lease; empty: $POD_NAME, else the host name.").StringVar(&opts.shard.identity)
	app.Flag("shard.lease-namespace", "Namespace of the shard's Leases; empty: the pod's namespace in a cluster, else default.").StringVar(&opts.shard.leaseNamespace)
	app.Flag("shard.kubeconfig", "Kubeconfig of the cluster that holds the shard's Leases; empty: in-cluster config.").StringVar(&opts.shard.kubeconfig)
	app.Flag("shard.lease-duration", "How long a replica's Lease lives without renewal: a replica killed without releasing it leaves the shard after this.").Default(model.Duration(membership.DefaultLeaseDuration).String()).SetValue(durationValue{"shard.lease-duration", &opts.shard.leaseDuration})
	app.Flag("shard.renew-deadline", "Bound of each request renewing the Lease or reading the members.").Default(model.Duration(membership.DefaultRenewDeadline).String()).SetValue(durationValue{"shard.renew-deadline", &opts.shard.renewDeadline})
	app.Flag("shard.retry-period", "Time between two renewals of the Lease (and reads of the members).").Default(model.Duration(membership.DefaultRetryPeriod).String()).SetValue(durationValue{"shard.retry-period", &opts.shard.retryPeriod})
	opts.web = kingpinflag.AddFlags(app, defaultListenAddress)
	app.Flag("web.external-url", "The URL under which the exporter is reached from outside, e.g. behind a reverse proxy that routes by path: the links of its pages start with its path, and when it has one every endpoint is served under it (as Prometheus does). Empty: served and linked at the root.").StringVar(&opts.externalURL)
	app.Flag("web.route-prefix", "Prefix of the endpoints' paths (a proxy that strips the external path: /). Default: the path of --web.external-url.").StringVar(&opts.routePrefix)
	app.Flag("web.enable-lifecycle", "Serve POST /-/reload (without it the endpoint answers 403; SIGHUP reloads either way).").BoolVar(&opts.enableLifecycle)
	app.Flag("web.probe-min-interval", "Least time between two on-demand checks of a target by /probe: a probe within it after a check's end gets that check's answer (probes at once always share one check). 0: every probe after a check's end checks again.").Default(exporter.DefaultProbeMinInterval.String()).SetValue(durationValue{"web.probe-min-interval", &opts.probeMinInterval})
	app.Flag("web.write-timeout", "Longest time an answer may take to write, from the end of the request's headers: a client that reads too slowly is cut. 0: derived, 2m or the check timeout plus 30s when longer, so that neither a slow /metrics of a large fleet nor a /probe is cut.").Default("0s").SetValue(durationValue{"web.write-timeout", &opts.writeTimeout})
	app.Flag("web.idle-timeout", "Longest time a kept-alive connection may wait for its next request.").Default(defaultIdleTimeout.String()).SetValue(durationValue{"web.idle-timeout", &opts.idleTimeout})
	app.Flag("auto-gomemlimit", "Set the Go runtime's soft memory limit (GOMEMLIMIT) to --auto-gomemlimit.ratio of the container's memory limit (its cgroup's), so that the garbage collector works harder before the kernel kills the process; nothing without a cgroup limit, or when GOMEMLIMIT is set.").Default("true").BoolVar(&opts.autoMemLimit)
	app.Flag("auto-gomemlimit.ratio", "The share of the cgroup's memory limit that --auto-gomemlimit sets (above 0, at most 1).").Default("0.9").Float64Var(&opts.memLimitRatio)
	promslogflag.AddFlags(app, opts.log)

	_, err := app.Parse(args)
	if exited {
		return nil, exitCode, true
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v, try --help\n", programName, err)
		return nil, 2, true
	}
	if opts.paths, err = parseWebPaths(opts.externalURL, opts.routePrefix); err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\n", programName, err)
		return nil, 2, true
	}
	return opts, 0, false
}

// durationValue is a duration flag whose parse error names the flag (kingpin's own says only
// "time: invalid duration").
type durationValue struct {
	flag string
	d    *time.Duration
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("--%s=%s: not a duration (examples: 0, 30s, 1m, 1h30m)", v.flag, s)
	}
	*v.d = d
	return nil
}

func (v durationValue) String() string { return v.d.String() }

// checkProbeMinInterval refuses a negative --web.probe-min-interval.
func checkProbeMinInterval(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("--web.probe-min-interval=%s: must not be negative (0 keeps no answer for later probes)", d)
	}
	return nil
}

// sizeValue is a size flag (bytes, or with a unit: 512KiB, 16MiB; KB and MB mean the same),
// whose parse error names the flag.
type sizeValue struct {
	flag string
	n    *int64
}

func (v sizeValue) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*v.n = n
		return nil
	}
	n, err := units.ParseBase2Bytes(s)
	if err != nil {
		return fmt.Errorf("--%s=%s: not a size (examples: 1048576, 512KiB, 16MiB)", v.flag, s)
	}
	*v.n = int64(n)
	return nil
}

func (v sizeValue) String() string { return fileread.FormatSize(*v.n) }

// checkLimits validates the size flags.
func checkLimits(l config.Limits) error {
	var errs []error
	for _, f := range []struct {
		flag string
		n    int64
	}{{config.FlagMaxSize, l.MaxSize}, {config.FlagTargetFileMaxSize, l.TargetFileMaxSize}} {
		if f.n < minFileSize || f.n > maxFileSize {
			errs = append(errs, fmt.Errorf("--%s=%s: must be from %s to %s", f.flag, fileread.FormatSize(f.n),
				fileread.FormatSize(minFileSize), fileread.FormatSize(maxFileSize)))
		}
	}
	if l.MaxTargets < 1 {
		errs = append(errs, fmt.Errorf("--%s=%d: must be at least 1", config.FlagMaxTargets, l.MaxTargets))
	}
	return errors.Join(errs...)
}

// checkTiming validates the two check flags and returns the round timeout to use (0 when checks
// are off). Every problem is reported, each naming its flag and the allowed range.

func checkTiming(interval, timeout time.Duration) (time.Duration, error) {
	var errs []error
	if interval < 0 || (interval > 0 && interval < minInterval) {
		errs = append(errs, fmt.Errorf("--provider-check-interval=%s: must be 0 (checks off) or at least %s", interval, minInterval))
	}
	if timeout < 0 {
		errs = append(errs, fmt.Errorf("--provider-check-timeout=%s: must be 0 (derive min(%s, interval)) or a positive duration up to the interval", timeout, maxDerivedTimeout))
	}
	if len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	if interval == 0 {
		// Checks are off: the timeout has nothing to bound, so any valid value is accepted.
		return 0, nil
	}
	if timeout > interval {
		return 0, fmt.Errorf("--provider-check-timeout=%s: may not exceed --provider-check-interval (%s); allowed: 0 (derive min(%s, interval)) or up to %s", timeout, interval, maxDerivedTimeout, interval)
	}
	if timeout == 0 {
		timeout = min(maxDerivedTimeout, interval)
	}
	return timeout, nil
}

// checkCRD validates the --crd.* flags.
func checkCRD(o crdOptions) error {
	if o.heartbeatInterval < time.Second {
		return fmt.Errorf("--crd.heartbeat-interval=%s: must be at least 1s", o.heartbeatInterval)
	}
	if o.leaderElect && !o.enabled {
		return errors.New("--crd.leader-elect: needs --crd.enabled")
	}
	if errs := validation.IsValidLabelValue(o.instance); o.instance == "" || len(errs) > 0 {
		return fmt.Errorf("--crd.instance=%q: must be a non-empty label value (at most 63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)", o.instance)
	}
	return nil
}

// checkShard validates the --shard.* flags.
func checkShard(o shardOptions) error {
	if !o.enabled {
		return nil
	}
	var errs []error
	if o.identity != "" {
		if len(validation.IsDNS1123Subdomain(o.identity)) > 0 {
			errs = append(errs, fmt.Errorf("--shard.identity=%q: must name a Lease: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters", o.identity))
		}
	}
	if o.leaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("--shard.lease-duration=%s: must be at least 1s", o.leaseDuration))
	}
	if o.retryPeriod <= 0 || o.retryPeriod >= o.leaseDuration {
		errs = append(errs, fmt.Errorf("--shard.retry-period=%s: must be above 0 and below --shard.lease-duration (%s)", o.retryPeriod, o.leaseDuration))
	}
	if o.renewDeadline <= 0 || o.renewDeadline > o.leaseDuration {
		errs = append(errs, fmt.Errorf("--shard.renew-deadline=%s: must be above 0 and at most --shard.lease-duration (%s)", o.renewDeadline, o.leaseDuration))
	}
	return errors.Join(errs...)
}

// holderPod is the pod this runs in, from the downward API ($POD_NAME, $POD_UID), so that it
// owns the writer's Lease while holding it; nil outside a pod.
func holderPod() *crdwriter.PodRef {
	name, uid := os.Getenv("POD_NAME"), os.Getenv("POD_UID")
	if name == "" || uid == "" {
		return nil
	}
	return &crdwriter.PodRef{Namespace: membership.PodNamespace(), Name: name, UID: uid}
}

// shardIdentity is --shard.identity, or the pod's name ($POD_NAME), or the host name.
func shardIdentity(o shardOptions) string {
	if o.identity != "" {
		return o.identity
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return programName
	}
	return strings.ToLower(host)
}

// shardLinger is how long a sharded replica that leaves goes on serving after it deleted its
// Lease: the others see it gone at their next read of the members (a retry period, two for a
// read in flight) and check its targets in a round they start at once (Runner.RunSoon), for
// which a few seconds are left; at most half of shutdownTimeout, which bounds the whole exit.
// 0 when sharding is off.
func shardLinger(o shardOptions) time.Duration {
	if !o.enabled {
		return 0
	}
	return min(2*o.retryPeriod+3*time.Second, shutdownTimeout-shardStepTimeout-shutdownReserve)
}

// shutdownReserve is the part of shutdownTimeout kept for the exit's last steps (deleting the
// shard's Lease, in-flight HTTP requests) after the linger and the writer's release.
const shutdownReserve = 3 * time.Second

// deadlineOf is ctx's deadline (now when it has none).
func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now()
	}
	return d
}

// shardStepTimeout bounds each of the shard's steps at exit (releasing the Lease, deleting it and
// the part), whatever the API server does, so that the whole exit stays within shutdownTimeout.
const shardStepTimeout = 2 * time.Second

// startSharding makes e check only the targets this replica owns and starts following the
// shard's members (--shard.enabled). release stops following them and releases the replica's
// Lease (within ctx and shardStepTimeout): call it first at shutdown, so that the others take
// over at once; remove deletes the Lease and the part: call it last, once the others have
// read its part.
func startSharding(o shardOptions, instance string, e *exporter.Exporter, logger *slog.Logger) (release, remove func(context.Context), err error) {
	if !o.enabled {
		return func(context.Context) {}, func(context.Context) {}, nil
	}
	cfg, err := ownClientConfig(o.kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--shard.kubeconfig=%q: %w", o.kubeconfig, err)
	}
	cfg.UserAgent = programName
	identity := shardIdentity(o)
	logger = logger.With("component", "shard", "identity", identity, "instance", instance)
	m, err := membership.New(membership.Options{
		Config:        cfg,
		Namespace:     cmp.Or(o.leaseNamespace, membership.PodNamespace()),
		Identity:      identity,
		Instance:      instance,
		LeaseDuration: o.leaseDuration,
		RenewDeadline: o.renewDeadline,
		RetryPeriod:   o.retryPeriod,
		Logger:        logger,
		Owner:         podOwner(identity),
		OnChange:      e.SetMembers,
		Part:          e.ShardPart,
		OnParts:       e.SetParts,
		Working:       e.ShardWorking,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := m.Join(context.Background()); err != nil {
		logger.Warn("cannot join the shard yet: checking nothing and not ready until the API server answers", "err", err)
	}
	e.Registry().MustRegister(m.Collectors()...)
	e.EnableSharding(identity, m.Members(), m.Joined)
	e.SetParts(m.Parts())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	logger.Info("sharding on: checking the targets this replica owns")
	bounded := func(ctx context.Context, f func(context.Context)) {
		ctx, cancel := context.WithTimeout(ctx, shardStepTimeout)
		defer cancel()
		f(ctx)
	}
	return func(ctx context.Context) {
			cancel()
			<-done
			bounded(ctx, func(ctx context.Context) { _ = m.Release(ctx) })
		}, func(ctx context.Context) {
			bounded(ctx, m.Delete)
		}, nil
}

// podOwner is the owner of the shard's Lease and part in a pod: the pod named identity, when
// $POD_UID (the downward API's metadata.uid) is set and $POD_NAME names it; nil elsewhere.
func podOwner(identity string) *metav1.OwnerReference {
	uid := os.Getenv("POD_UID")
	if uid == "" || os.Getenv("POD_NAME") != identity {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: identity, UID: types.UID(uid)}
}

// startCRDWriter starts mirroring the runner's snapshots into ProviderHealth objects, or, with
// checks off, deletes ours (RunChecksOff). The returned channel is closed when it has stopped (ctx done).
func startCRDWriter(ctx context.Context, o crdOptions, e *exporter.Exporter, interval time.Duration, logger *slog.Logger) (<-chan struct{}, error) {
	done := make(chan struct{})
	if !o.enabled {
		close(done)
		return done, nil
	}
	cfg, err := ownClientConfig(o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--crd.kubeconfig=%q: %w", o.kubeconfig, err)
	}
	cfg.UserAgent = programName
	logger = logger.With("component", "crdwriter", "instance", o.instance)
	w, err := crdwriter.New(crdwriter.Options{
		Config:            cfg,
		Source:            e.Fleet(),
		Logger:            logger,
		Instance:          o.instance,
		Interval:          interval,
		HeartbeatInterval: o.heartbeatInterval,
		MinReasonInterval: cmp.Or(o.minReasonInterval, -1), // 0: none
		LeaderElect:       o.leaderElect,
		LeaseNamespace:    o.leaseNamespace,
		LeaseName:         o.leaseName,
		HolderPod:         holderPod(),
		Registerer:        e.Registry(),
	})
	if err != nil {
		return nil, err
	}
	e.CRDReport = w.Report
	go func() {
		defer close(done)
		if !e.ChecksOn() {
			// Checks off: no verdicts to mirror, and this instance's objects would only go
			// stale.
			if err := w.RunChecksOff(ctx); err != nil && ctx.Err() == nil {
				logger.Error("cannot delete the ProviderHealth objects", "err", err)
			}
			return
		}
		// The providers it keeps objects for are the snapshot's: a reload publishes a new
		// snapshot at once, and the writer deletes the objects of removed providers.
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			logger.Error("ProviderHealth writer stopped", "err", err)
		}
	}()
	return done, nil
}

// run is the whole program; it returns the exit code. signals delivers SIGHUP (reload) and
// SIGTERM/SIGINT (shutdown).
func run(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	opts, code, done := parseFlags(args, stdout, stderr)
	if done {
		return code
	}
	if opts.configCheck {
		return configCheck(opts, stdout, stderr)
	}

	logger := promslog.New(opts.log)
	// The flags are checked before the providers file is read: a wrong flag is reported as
	// such, not hidden behind a file problem.
	timeout, err := checkTiming(opts.interval, opts.timeout)
	err = errors.Join(err, checkCRD(opts.crd), checkProbeMinInterval(opts.probeMinInterval), checkShard(opts.shard), checkLimits(opts.limits), checkWebTimeouts(opts), checkMemLimitRatio(opts.memLimitRatio))
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			logger.Error("invalid flag", "err", line)
		}
		return 1
	}
	if opts.autoMemLimit {
		setMemLimit(logger, opts.memLimitRatio, memlimit.FromCgroup)
	}
	logger.Info("starting "+programName, "version", version.Info(), "build_context", version.BuildContext())
	// client-go's own logs (kubernetes checks, leader election, events) go to the same handler.
	// klog's logger is process-wide and read without a lock: set it once, before any client.
	klogOnce.Do(func() { klog.SetSlogLogger(logger.With("component", "client-go")) })

	// The first load reads files (bounded each, but a glob may name many): a signal to stop
	// is obeyed meanwhile.
	type loaded struct {
		e   *exporter.Exporter
		err error
	}
	loadDone := make(chan loaded, 1)
	go func() {
		e, err := exporter.New(opts.configFile, opts.interval, timeout, logger, exporter.WithFileLimits(opts.limits))
		loadDone <- loaded{e, err}
	}()
	var e *exporter.Exporter
	for e == nil {
		select {
		case l := <-loadDone:
			if l.err != nil {
				logger.Error("cannot load the providers file", "file", opts.configFile, "err", l.err)
				return 1
			}
			e = l.e
		case sig := <-signals:
			if sig != syscall.SIGHUP {
				logger.Info("shutting down before the providers file was loaded", "signal", sig.String())
				return 0
			}
			// The load under way reads the file as it is now.
		}
	}
	e.Lifecycle = opts.enableLifecycle
	e.ProbeMinInterval = opts.probeMinInterval
	e.AutoReload = opts.autoReload
	e.SetExternalPath(opts.paths.external)
	if e.ChecksOn() {
		logger.Info("checks on", "interval", opts.interval, "timeout", timeout, "providers", e.ProviderCount())
	} else {
		logger.Info("checks off (--provider-check-interval=0): serving provider_info only", "providers", e.ProviderCount())
	}

	// Sharding is set up, the members read once, before the first round, so that it checks
	// only what this replica owns (everything when the API server cannot be reached).
	releaseShard, removeShard, err := startSharding(opts.shard, opts.crd.instance, e, logger)
	if err != nil {
		logger.Error("cannot start sharding", "err", err)
		e.Close()
		return 1
	}
	ctx, stopRunner := context.WithCancel(context.Background())
	runnerDone := make(chan struct{})
	if e.ChecksOn() {
		go func() {
			defer close(runnerDone)
			e.Runner().Run(ctx)
		}()
	} else {
		close(runnerDone)
	}
	// The writer stops first at exit (its Lease released), not after the runner.
	writerCtx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	writerDone, err := startCRDWriter(writerCtx, opts.crd, e, opts.interval, logger)
	if err != nil {
		logger.Error("cannot start the ProviderHealth writer", "err", err)
		releaseShard(context.Background())
		stopRunner()
		<-runnerDone
		e.Close()
		return 1
	}

	server := newHTTPServer(opts, timeout, exporter.Guard(withRoutePrefix(e.Routes(), opts.paths.route)), logger)
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ListenAndServe(server, opts.web, logger) }()

	// SIGHUP reloads run on their own goroutine, so that a signal to stop is obeyed while one
	// reads files; signals that arrive during a reload coalesce into one more.
	reloads := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-reloads:
				_ = e.Reload() // Reload logs the outcome and sets the reload metrics.
			}
		}
	}()

	code = 0
	serving := true
loop:
	for {
		select {
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				logger.Info("reloading the providers file", "signal", sig.String())
				select {
				case reloads <- struct{}{}:
				default: // one is already queued; it reads the file as it is then
				}
				continue
			}
			logger.Info("shutting down", "signal", sig.String())
			break loop
		case err := <-serveErr:
			serving = false
			logger.Error("http server failed", "err", err)
			code = 1
			break loop
		}
	}

	// The whole exit takes at most shutdownTimeout, whatever the API server does.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	// Leave the shard first (release the Lease), so that the other replicas take over this
	// one's targets at their next read of the members rather than at the Lease's expiry, and
	// go on serving them while the others check them (make before break; a second signal
	// cuts it short).
	// The writer's Lease is released at the same time, so that another replica writes the
	// objects from its next retry rather than after this one's linger.
	stopWriter()
	releaseShard(shutdownCtx)
	if linger := shardLinger(opts.shard); serving && linger > 0 {
		logger.Info("left the shard; serving this replica's targets while the others take them over", "for", linger)
		select {
		case <-time.After(linger):
		case <-signals:
		case err := <-serveErr:
			serving = false
			logger.Error("http server failed", "err", err)
			code = 1
		}
	}
	// Stop the checks first and let the runner return, so that no round starts a check on a
	// closed checker. (A check abandoned at a deadline may still be on its way back; a
	// checker's Close must tolerate that.)
	e.Stopping()
	stopRunner()
	stopped := make(chan struct{})
	go func() {
		<-runnerDone
		e.Close()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-shutdownCtx.Done():
		logger.Error("the checks did not stop in time; exiting without them", "timeout", shutdownTimeout)
		code = 1
	}
	// The writer releases its Lease within its renew deadline; an API server that does not
	// answer is not waited for past the exit's last seconds: the Lease then expires.
	writerWait, cancelWriterWait := context.WithTimeout(shutdownCtx, max(time.Until(deadlineOf(shutdownCtx))-shutdownReserve, 0))
	select {
	case <-writerDone:
	case <-writerWait.Done():
		logger.Warn("the ProviderHealth writer did not release its Lease in time; it expires after its lease duration")
	}
	cancelWriterWait()
	// The others read this replica's part (its last verdicts, their counts) while it lingered.
	removeShard(shutdownCtx)
	if serving {
		// In-flight requests get what is left of the exit, and a second at least.
		serverCtx, cancelServer := context.WithTimeout(context.Background(), max(time.Until(deadlineOf(shutdownCtx)), time.Second))
		defer cancelServer()
		if err := server.Shutdown(serverCtx); err != nil {
			logger.Error("http server shutdown", "err", err)
			code = 1
		}
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server failed", "err", err)
			code = 1
		}
	}
	logger.Info("stopped")
	return code
}

// unreadableFiles lists the files the providers reference (kubeconfigs, keys, known_hosts) that
// cannot be read here (missing, not a regular file, too large, not readable). They are warnings, not problems: a missing file is a verdict at run time
// (ConfigError, CredentialsError, KeyMaterialError), and a file check run away from the
// deployment (in CI, on a laptop) does not see the files mounted into it.
func unreadableFiles(cfg *config.Config) []string {
	var ws []string
	for _, pf := range cfg.Files() {
		if _, err := fileread.Read(pf.Path, fileread.KnownHostsLimit); err != nil {
			ws = append(ws, fmt.Sprintf("provider %s: %s: %v (its checks will fail until the file is readable)", pf.Provider, pf.Field, err))
		}
	}
	return ws
}

// configCheck implements --config.check: it validates the flags, the web config file (when
// given) and the providers file, builds (and closes again) every checker as a start would, and
// prints every problem, or "ok".
func configCheck(opts *options, stdout, stderr io.Writer) int {
	var problems []string
	timeout, err := checkTiming(opts.interval, opts.timeout)
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if err := checkCRD(opts.crd); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkProbeMinInterval(opts.probeMinInterval); err != nil {
		problems = append(problems, err.Error())
	}
	if err := checkShard(opts.shard); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if err := checkWebTimeouts(opts); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	limitsErr := checkLimits(opts.limits)
	if limitsErr != nil {
		problems = append(problems, strings.Split(limitsErr.Error(), "\n")...)
		opts.limits = config.DefaultLimits
	}
	if path := *opts.web.WebConfigFile; path != "" {
		if err := web.Validate(path); err != nil {
			problems = append(problems, fmt.Sprintf("--web.config.file=%s: %v", path, err))
		}
	}
	cfg, err := config.LoadWith(opts.configFile, timeout, opts.limits.MaxSize)
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	} else {
		hostProblems, hostWarnings, expanded := exporter.CheckHostFiles(cfg, opts.limits)
		problems = append(problems, hostProblems...)
		if err := exporter.ValidateCheckers(expanded); err != nil {
			problems = append(problems, strings.Split(err.Error(), "\n")...)
		}
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		for _, w := range slices.Concat(unreadableFiles(cfg), hostWarnings) {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}

// checkMemLimitRatio checks --auto-gomemlimit.ratio.
func checkMemLimitRatio(ratio float64) error {
	if ratio <= 0 || ratio > 1 {
		return fmt.Errorf("--auto-gomemlimit.ratio=%v: must be above 0 and at most 1", ratio)
	}
	return nil
}

// setMemLimit sets the Go runtime's soft memory limit to ratio of what limit reports (the
// cgroup's memory limit), as Prometheus's --auto-gomemlimit does. The library logs what it set,
// or why it set nothing (GOMEMLIMIT given, no limit found: then the runtime has none), and a
// failure, which leaves the runtime's limit as it was.
func setMemLimit(logger *slog.Logger, ratio float64, limit memlimit.Provider) {
	_, _ = memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(limit),
		memlimit.WithLogger(logger.With("component", "automemlimit")))
}
