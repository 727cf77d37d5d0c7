// Command provider_health_exporter checks, on a schedule, every infrastructure provider a platform
// depends on, of the provider types of this build (package providers lists them), and serves the
// cached verdicts as Prometheus metrics, a status page and readiness endpoints.
//
// This file holds the process's life: load, start, serve; shutdown.go shuts it down. The command
// line is in flags.go, --config.check in configcheck.go, sharding and the ProviderHealth writer in cluster.go. The HTTP
// endpoints, the status page, reloading and the construction of checkers from the providers file
// live in package exporter.
package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"k8s.io/klog/v2"

	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	// The provider types of this build.
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

const programName = "provider_health_exporter"

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, signals))
}

// klogOnce guards the process-wide klog logger (run may be called more than once by tests).
var klogOnce sync.Once

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
	timeout, err := checkFlags(opts)
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

	e, code, ok := load(opts, timeout, signals, logger)
	if !ok {
		return code
	}
	p, err := start(opts, timeout, e, signals, logger)
	if err != nil {
		return 1
	}
	code = p.serve()
	return p.shutDown(code)
}

// load reads the providers file and builds the exporter from it. The first load reads files
// (bounded each, but a glob may name many): a signal to stop is obeyed meanwhile, and then ok
// is false and code the exit code, as it is when the file cannot be loaded.
func load(opts *options, timeout time.Duration, signals <-chan os.Signal, logger *slog.Logger) (e *exporter.Exporter, code int, ok bool) {
	type loaded struct {
		e   *exporter.Exporter
		err error
	}
	loadDone := make(chan loaded, 1)
	go func() {
		e, err := exporter.New(opts.configFile, opts.interval, timeout, logger, exporter.WithFileLimits(opts.limits))
		loadDone <- loaded{e, err}
	}()
	for e == nil {
		select {
		case l := <-loadDone:
			if l.err != nil {
				logger.Error("cannot load the providers file", "file", opts.configFile, "err", l.err)
				return nil, 1, false
			}
			e = l.e
		case sig := <-signals:
			if sig != syscall.SIGHUP {
				logger.Info("shutting down before the providers file was loaded", "signal", sig.String())
				return nil, 0, false
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
	return e, 0, true
}

// process is the exporter once started: its parts, and how to stop each.
type process struct {
	opts    *options
	logger  *slog.Logger
	e       *exporter.Exporter
	signals <-chan os.Signal

	// releaseShard and removeShard leave the shard (see startSharding).
	releaseShard, removeShard func(context.Context)
	// stopRunner stops the runner and the reloads; runnerDone is closed once the runner returned.
	stopRunner context.CancelFunc
	runnerDone chan struct{}
	// stopWriter stops the ProviderHealth writer; writerDone is closed once it stopped.
	stopWriter context.CancelFunc
	writerDone <-chan struct{}

	server *http.Server
	// serveErr delivers what the HTTP server returned; serving is false once it did.
	serveErr chan error
	serving  bool
	// reloads queues one reload of the providers file (SIGHUP).
	reloads chan struct{}
}

// start starts sharding, the runner, the ProviderHealth writer, the HTTP server and the
// reloads, in that order. On an error, logged here, what was started is stopped again.
func start(opts *options, timeout time.Duration, e *exporter.Exporter, signals <-chan os.Signal, logger *slog.Logger) (*process, error) {
	p := &process{opts: opts, logger: logger, e: e, signals: signals}
	// Sharding is set up, the members read once, before the first round, so that it checks
	// only what this replica owns (everything when the API server cannot be reached).
	source, releaseShard, removeShard, err := startSharding(opts.shard, opts.crd.instance, opts.interval, e, logger)
	p.releaseShard, p.removeShard = releaseShard, removeShard
	if err != nil {
		logger.Error("cannot start sharding", "err", err)
		e.Close()
		return nil, err
	}
	ctx, stopRunner := context.WithCancel(context.Background())
	p.stopRunner, p.runnerDone = stopRunner, make(chan struct{})
	if e.ChecksOn() {
		go func() {
			defer close(p.runnerDone)
			e.Runner().Run(ctx)
		}()
	} else {
		close(p.runnerDone)
	}
	// The writer stops first at exit (its Lease released), not after the runner.
	writerCtx, stopWriter := context.WithCancel(ctx)
	p.stopWriter = stopWriter
	if p.writerDone, err = startCRDWriter(writerCtx, opts.crd, e, source, opts.interval, logger); err != nil {
		logger.Error("cannot start the ProviderHealth writer", "err", err)
		stopWriter()
		p.releaseShard(context.Background())
		stopRunner()
		<-p.runnerDone
		e.Close()
		return nil, err
	}

	p.server = newHTTPServer(opts, timeout, exporter.Guard(withRoutePrefix(e.Routes(), opts.paths.route)), logger)
	p.serveErr, p.serving = make(chan error, 1), true
	go func() { p.serveErr <- web.ListenAndServe(p.server, opts.web, logger) }()

	// SIGHUP reloads run on their own goroutine, so that a signal to stop is obeyed while one
	// reads files; signals that arrive during a reload coalesce into one more.
	p.reloads = make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.reloads:
				_ = e.Reload() // Reload logs the outcome and sets the reload metrics.
			}
		}
	}()
	return p, nil
}

// serve answers signals until one says to stop (SIGTERM, SIGINT) or the HTTP server fails, and
// returns the exit code so far.
func (p *process) serve() int {
	for {
		select {
		case sig := <-p.signals:
			if sig == syscall.SIGHUP {
				p.logger.Info("reloading the providers file", "signal", sig.String())
				select {
				case p.reloads <- struct{}{}:
				default: // one is already queued; it reads the file as it is then
				}
				continue
			}
			p.logger.Info("shutting down", "signal", sig.String())
			return 0
		case err := <-p.serveErr:
			p.serving = false
			p.logger.Error("http server failed", "err", err)
			return 1
		}
	}
}

// setMemLimit sets the Go runtime's soft memory limit to ratio of what limit reports (the
// cgroup's memory limit), as Prometheus's --auto-gomemlimit does. The library logs what it set,
// or why it set nothing (GOMEMLIMIT given, no limit found: then the runtime has none), and a
// failure, which leaves the runtime's limit as it was.
func setMemLimit(logger *slog.Logger, ratio float64, limit memlimit.Provider) {
	_, _ = memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(limit),
		memlimit.WithLogger(logger.With("component", "automemlimit")))
}
