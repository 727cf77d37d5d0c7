package main

// The command line: the flags, their parsing and their checks. A wrong flag is reported by
// name, with the values it allows, before anything is read or started.

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
	"github.com/provider-health-exporter/provider-health-exporter/shard"
)

const (
	// minInterval is the shortest --provider-check-interval other than 0 (checks off): a
	// shorter one would put load on the providers for no gain in alerting.
	minInterval = 10 * time.Second
	// maxDerivedTimeout caps the timeout derived when --provider-check-timeout is 0.
	maxDerivedTimeout = exporter.MaxDerivedTimeout

	// The size flags' bounds: below minFileSize no providers file fits, above maxFileSize a
	// file would be parsed in memory at many times its size.
	minFileSize = 1 << 10
	maxFileSize = 1 << 30
)

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
	app.Flag("shard.lease-duration", "How long a replica's Lease lives without renewal: a replica killed without releasing it leaves the shard after this.").Default(model.Duration(shard.DefaultLeaseDuration).String()).SetValue(durationValue{"shard.lease-duration", &opts.shard.leaseDuration})
	app.Flag("shard.renew-deadline", "Bound of each request renewing the Lease or reading the members.").Default(model.Duration(shard.DefaultRenewDeadline).String()).SetValue(durationValue{"shard.renew-deadline", &opts.shard.renewDeadline})
	app.Flag("shard.retry-period", "Time between two renewals of the Lease (and reads of the members).").Default(model.Duration(shard.DefaultRetryPeriod).String()).SetValue(durationValue{"shard.retry-period", &opts.shard.retryPeriod})
	opts.web = kingpinflag.AddFlags(app, exporter.DefaultListenAddress)
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

// checkMemLimitRatio checks --auto-gomemlimit.ratio.
func checkMemLimitRatio(ratio float64) error {
	if ratio <= 0 || ratio > 1 {
		return fmt.Errorf("--auto-gomemlimit.ratio=%v: must be above 0 and at most 1", ratio)
	}
	return nil
}

// checkFlags checks the flags a start needs (--config.check checks the same, and the files) and
// returns the round timeout in effect. Every problem is reported, one per line of the error.
func checkFlags(opts *options) (timeout time.Duration, err error) {
	timeout, err = checkTiming(opts.interval, opts.timeout)
	err = errors.Join(err, checkCRD(opts.crd), checkProbeMinInterval(opts.probeMinInterval), checkShard(opts.shard),
		checkLimits(opts.limits), checkWebTimeouts(opts), checkMemLimitRatio(opts.memLimitRatio))
	return timeout, err
}
