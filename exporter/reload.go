package exporter

import (
	"errors"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// errShuttingDown refuses a reload that arrives after the checkers were closed for exit.
var errShuttingDown = errors.New("the exporter is shutting down")

// Reload re-reads the providers file (SIGHUP, POST /-/reload). A file that does not load, or
// whose checkers cannot be built, changes nothing: the running checkers stay, the reason is
// logged and returned, and the reload-success gauge drops to 0. A good file replaces the
// checkers: providers whose configuration did not change keep their checker (and with it their
// connections and, in the runner, their state); the checkers of removed or changed providers
// are closed once the runner has switched to the new set, so that the next round uses it.
func (e *Exporter) Reload() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errShuttingDown
	}
	set, err := e.load()
	if err != nil {
		e.reloadSuccess.Set(0)
		e.logger.Error("reload failed, keeping the running providers", "file", e.configFile, "err", err)
		return err
	}
	e.runner.SetProviders(set.providers())
	e.entries, e.fileCfg = set.entries, set.cfg
	// A round already running may still be inside a retired checker's Check; the runner
	// discards that result, and Close must tolerate the call in flight.
	closeAll(set.retired, e.logger)
	e.reloadSuccess.Set(1)
	e.reloadTimestamp.SetToCurrentTime()
	e.logger.Info("providers file reloaded", "file", e.configFile, "providers", len(set.checkers),
		"added", set.added, "changed", set.changed, "kept", set.kept, "removed", set.removed)
	return nil
}

// load reads the providers file and its providers' host files, and builds the checkers
// against the running ones. e.mu is held.
func (e *Exporter) load() (*checkerSet, error) {
	// The version read is remembered whether it loads or not, so that an auto-reload tries a
	// bad file again only once it changed.
	e.configState, _ = checks.StatFile(e.configFile)
	cfg, err := config.LoadFor(e.configFile, e.timeout)
	if err != nil {
		return nil, err
	}
	expanded, hostWarnings := e.inventory.expand(cfg)
	set, err := buildCheckers(expanded, e.entries, e.logger)
	if err != nil {
		return nil, err
	}
	set.cfg = cfg
	for _, w := range hostWarnings {
		e.logger.Warn("host file warning", "warning", w)
	}
	// Warnings (host-key verification turned off) are repeated at every load, so that they
	// stay in recent logs for as long as the setting stays in the file.
	for _, w := range cfg.Warnings() {
		e.logger.Warn("providers file warning", "file", e.configFile, "warning", w)
	}
	return set, nil
}

// beforeRound runs before each round of checks (the runner's BeforeRound): with
// --config.auto-reload, a reload of the providers file when it changed since its last load;
// then the host files that changed.
func (e *Exporter) beforeRound() {
	if e.AutoReload && e.configChanged() {
		e.logger.Info("providers file changed, reloading (--config.auto-reload)", "file", e.configFile)
		_ = e.Reload() // a failure is logged and exported by reload
	}
	e.refreshInventory()
}

// configChanged reports whether the providers file is no longer the version its last load read.
// A file that could not be stat'ed then and cannot now (deleted) has not changed: it is tried
// again once it is back.
func (e *Exporter) configChanged() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now, _ := checks.StatFile(e.configFile)
	return !e.closed && now != e.configState
}
