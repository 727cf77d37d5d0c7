// Package exporter is the exporter's HTTP side and what it serves: the checkers built from the
// providers file (checkers.go) and their round runner, reloading (reload.go), the providers'
// host files (inventory.go), the endpoints (http.go), the status model (exporter/status) that
// the JSON API (api.go) encodes and the status page (landing.go, templates/) renders, and
// /probe (probehandler.go). The command (package main) parses the flags, builds an
// Exporter with New, runs its rounds, serves its Handler and reloads or closes it on a signal.
package exporter

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/collector"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
)

// Exporter is the running program: the checkers built from the providers file, the round
// runner, the metrics registry, and what reloading needs. Build it with New; set its exported
// fields before it serves or runs.
type Exporter struct {
	logger     *slog.Logger
	configFile string
	// interval and timeout of the rounds; interval 0 means checks are off.
	interval time.Duration
	timeout  time.Duration
	runner   *checks.Runner
	registry *prometheus.Registry
	// providerMetrics serves the runner's snapshot beside the registry.
	providerMetrics *collector.Gatherer

	reloadSuccess   prometheus.Gauge
	reloadTimestamp prometheus.Gauge
	// checkInterval and checkTimeout export the effective interval and timeout, so that rules
	// can judge staleness and slowness against what this exporter was told (the mixin's
	// ProviderHealthChecksStale and ProviderHealthChecksSlow).
	checkInterval prometheus.Gauge
	checkTimeout  prometheus.Gauge
	// Lifecycle: POST /-/reload is served (--web.enable-lifecycle); else it answers 403. Set
	// before the server starts.
	Lifecycle bool
	// AutoReload: the providers file is reloaded before a round when it changed
	// (--config.auto-reload); set before the runner starts.
	AutoReload bool
	// ProbeMinInterval: for this long after an on-demand check of a target ends, /probe of the
	// target answers its verdict instead of checking again (--web.probe-min-interval); 0 keeps
	// no answer (probes at once still share one check). Set before the server starts.
	ProbeMinInterval time.Duration

	// Readiness, when set before the server starts, is asked by /-/ready after the checks
	// are found on: an error makes it answer 503 with the error (the shard's Ready: the
	// members not read yet).
	Readiness func() error

	// CRDReport is the ProviderHealth writer's Report (--crd.enabled), set before the server
	// starts; nil without one. The status page and the status API show its Report.
	CRDReport func() crdwriter.Report

	// landingSlots bounds the status page renders in flight (landingMaxInFlight).
	landingSlots chan struct{}
	// linkPrefix starts the status page's links (SetExternalPath); empty: relative links.
	linkPrefix string

	// inventory reads the providers' host files (hostFiles).
	inventory *inventory

	// limits bound the reads of the providers file and the host files (WithFileLimits).
	limits config.Limits
	// reloadSlot serializes reloads (SIGHUP and POST /-/reload may race) and the host files'
	// refreshes: a one-slot channel, held while they read files, so that a refresh before a
	// round skips instead of waiting for a reload.
	reloadSlot chan struct{}
	// roundStarted is when the last round started (Unix nanoseconds), for readiness.
	roundStarted atomic.Int64
	// stopping is set when the process begins to shut down: /-/ready answers 503 from then.
	stopping atomic.Bool

	// mu guards what runs (entries, fileCfg, configState, closed); it is never held across a
	// read of a file or a network call.
	mu      sync.Mutex
	entries map[string]entry
	// fileCfg is the providers file as last loaded well, before its host files are read: what
	// a refresh of the host files expands again.
	fileCfg *config.Config
	// configState is the providers file's version the last load (good or bad) read.
	configState checks.FileState
	closed      bool
}

// New loads the providers file, builds its checkers and a runner for them, and registers every
// metric on a registry of its own (not the global one, so that nothing a library registers
// globally leaks into /metrics). interval 0 turns the checks off; timeout is the deadline of a
// round. Nothing is contacted: the checks start with Runner().Run.
func New(configFile string, interval, timeout time.Duration, logger *slog.Logger, opts ...Option) (*Exporter, error) {
	e := &Exporter{
		logger:       logger,
		configFile:   configFile,
		interval:     interval,
		timeout:      timeout,
		registry:     prometheus.NewRegistry(),
		landingSlots: make(chan struct{}, landingMaxInFlight),
		limits:       config.DefaultLimits,
		reloadSlot:   make(chan struct{}, 1),
		reloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace,
			Name:      "config_last_reload_successful",
			Help:      "Whether the last load of the providers file succeeded (1) or failed (0).",
		}),
		reloadTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace,
			Name:      "config_last_reload_success_timestamp_seconds",
			Help:      "When the providers file was last loaded successfully, in seconds since the Unix epoch.",
		}),
		checkInterval: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace,
			Name:      "provider_check_interval_seconds",
			Help:      "The interval between two rounds of checks (--provider-check-interval); 0 when checks are off.",
		}),
		checkTimeout: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: checks.MetricNamespace,
			Name:      "provider_check_timeout_seconds",
			Help:      "The deadline of one round of checks in effect (--provider-check-timeout, or the value derived from the interval); 0 when checks are off.",
		}),
	}
	for _, o := range opts {
		o(e)
	}
	e.inventory = newInventory(logger, e.limits)
	e.checkInterval.Set(interval.Seconds())
	e.checkTimeout.Set(timeout.Seconds())
	set, err := e.load()
	if err != nil {
		return nil, err
	}
	e.entries, e.fileCfg = set.entries, set.cfg
	e.runner = checks.NewRunner(checks.Options{
		Interval:    interval,
		Timeout:     timeout,
		Logger:      logger,
		BeforeRound: e.beforeRound,
	}, nil)
	e.runner.SetProviders(set.providers())
	e.reloadSuccess.Set(1)
	e.reloadTimestamp.SetToCurrentTime()

	e.providerMetrics = collector.NewGatherer(e.runner.Current)
	e.registry.MustRegister(
		versioncollector.NewCollector(checks.MetricNamespace),
		e.reloadSuccess,
		e.reloadTimestamp,
		e.checkInterval,
		e.checkTimeout,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		hostpool.Collector(),
		e.inventory,
	)
	return e, nil
}

// Option sets up an Exporter in New.
type Option func(*Exporter)

// WithFileLimits bounds the reads of the providers file and of the host files
// (--config.max-size, --config.host-file-max-size); config.DefaultLimits otherwise.
func WithFileLimits(l config.Limits) Option {
	return func(e *Exporter) { e.limits = l }
}

// ChecksOn reports whether rounds of checks run (--provider-check-interval is not 0).
func (e *Exporter) ChecksOn() bool { return e.interval > 0 }

// Runner is the round runner of the checks: its Run runs the rounds until its context is done,
// and the ProviderHealth writer reads its snapshots.
func (e *Exporter) Runner() *checks.Runner { return e.runner }

// Registry is the exporter's own metrics registry, served by /metrics before the snapshot's
// families; the ProviderHealth writer registers its metrics there.
func (e *Exporter) Registry() *prometheus.Registry { return e.registry }

// Checkers returns the configured checkers (the providers file's, as last loaded well); the
// shard checks the others' verdicts against them.
func (e *Exporter) Checkers() []checks.Checker {
	e.mu.Lock()
	defer e.mu.Unlock()
	cs := make([]checks.Checker, 0, len(e.entries))
	for _, en := range e.entries {
		cs = append(cs, en.checker)
	}
	return cs
}

// Working reports an error when the rounds are wedged, the last having started longer ago
// than two intervals plus the timeout (the limit of readiness); nil with checks off or before
// the first round. A sharded replica then releases its Lease, so that its share moves to the
// others (shard.Options.Working).
func (e *Exporter) Working() error {
	if !e.ChecksOn() {
		return nil
	}
	ns := e.roundStarted.Load()
	if ns == 0 {
		// No round has started yet: the replica is starting.
		return nil
	}
	now := time.Now()
	started := time.Unix(0, ns)
	if late := now.Sub(started); late > e.stalledAfter() {
		return fmt.Errorf("no round of checks has started for %s (the last started at %s; one starts every %s)",
			late.Round(time.Second), started.UTC().Format(time.RFC3339), e.interval)
	}
	return nil
}

// ProviderCount is the number of configured providers.
func (e *Exporter) ProviderCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.entries)
}

// Close closes every checker. The runner must have returned: no check may be running. Later
// reloads are refused.
// A reload still reading files then closes what it built instead of installing it. Close
// does not wait for it.
func (e *Exporter) Close() {
	e.stopping.Store(true)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	set := &checkerSet{}
	for _, en := range e.entries {
		set.checkers = append(set.checkers, en.checker)
	}
	e.entries = nil
	e.mu.Unlock()
	closeAll(set.allClosers(), e.logger)
}

// Stopping marks the exporter as shutting down: /-/ready answers 503 from now on, so that
// load balancers stop sending requests while the process drains.
func (e *Exporter) Stopping() { e.stopping.Store(true) }
