package exporter

import (
	"errors"
	"time"

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
//
// Reloads (and the host files' refreshes) take turns in the reload slot, which is held while
// the files are read; e.mu is taken only to read and to switch the running set, so that no
// request and no round waits on a file.
func (e *Exporter) Reload() error {
	e.reloadSlot <- struct{}{}
	defer e.releaseReloadSlot()
	return e.reload()
}

// reload is Reload in the reload slot.
func (e *Exporter) reload() error {
	if _, _, closed := e.running(); closed {
		return errShuttingDown
	}
	set, err := e.load()
	if err != nil {
		e.reloadSuccess.Set(0)
		e.logger.Error("reload failed, keeping the running providers", "file", e.configFile, "err", err)
		return err
	}
	// A round already running may still be inside a retired checker's Check; the runner
	// discards that result, and Close must tolerate the call in flight.
	if err := e.install(set, true); err != nil {
		return err
	}
	e.reloadSuccess.Set(1)
	e.reloadTimestamp.SetToCurrentTime()
	e.logger.Info("providers file reloaded", "file", e.configFile, "providers", len(set.checkers),
		"added", set.added, "changed", set.changed, "kept", set.kept, "removed", set.removed)
	return nil
}

// tryReloadSlot takes the reload slot when it is free; releaseReloadSlot gives it back.
func (e *Exporter) tryReloadSlot() bool {
	select {
	case e.reloadSlot <- struct{}{}:
		return true
	default:
		return false
	}
}

func (e *Exporter) releaseReloadSlot() { <-e.reloadSlot }

// running returns what runs now: the providers file as last loaded well, the entries, and
// whether the exporter has closed its checkers.
func (e *Exporter) running() (*config.Config, map[string]entry, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fileCfg, e.entries, e.closed
}

// install switches the runner to set (and, withCfg, remembers its providers file), then closes
// the checkers set retired. After Close it closes set's new checkers instead and refuses.
// The caller holds the reload slot.
func (e *Exporter) install(set *checkerSet, withCfg bool) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		closeAll(set.built, e.logger)
		return errShuttingDown
	}
	e.runner.SetProviders(set.providers())
	e.entries = set.entries
	if withCfg {
		e.fileCfg = set.cfg
	}
	e.mu.Unlock()
	closeAll(set.retired, e.logger)
	return nil
}

// load reads the providers file and its providers' host files, and builds the checkers
// against the running ones. The caller holds the reload slot (or is New).
func (e *Exporter) load() (*checkerSet, error) {
	// The version read is remembered whether it loads or not, so that an auto-reload tries a
	// bad file again only once it changed.
	state, _ := checks.StatFile(e.configFile)
	e.mu.Lock()
	e.configState = state
	entries := e.entries
	e.mu.Unlock()
	cfg, err := config.LoadWith(e.configFile, e.timeout, e.limits.MaxSize)
	if err != nil {
		return nil, err
	}
	expanded, hostWarnings := e.inventory.expand(cfg)
	set, err := buildCheckers(expanded, entries, e.logger)
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

// beforeRound runs before each round of checks (the runner's BeforeRound): it marks the
// round's start (readiness), then, with --config.auto-reload, reloads the providers file when
// it changed since its last load, then reads the host files that changed. A reload already
// running (SIGHUP, POST /-/reload) is not waited for: it reads the files itself.
func (e *Exporter) beforeRound() {
	e.roundStarted.Store(time.Now().UnixNano())
	if !e.tryReloadSlot() {
		return
	}
	if e.AutoReload && e.configChanged() {
		e.logger.Info("providers file changed, reloading (--config.auto-reload)", "file", e.configFile)
		_ = e.reload() // a failure is logged and exported by reload
	}
	e.releaseReloadSlot()
	e.refreshInventory()
}

// configChanged reports whether the providers file is no longer the version its last load read.
// A file that could not be stat'ed then and cannot now (deleted) has not changed: it is tried
// again once it is back.
func (e *Exporter) configChanged() bool {
	now, _ := checks.StatFile(e.configFile)
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.closed && now != e.configState
}
