package exporter

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// inventory reads the target files of the providers that name some (config.Inventory: a kvm
// provider's hostFiles) and remembers each file's last good groups: a file is read again when
// it changed (checks.FileState, the project's one file-change detector), and one that stops
// reading well (unreadable, invalid) keeps the groups it last read well, its problem logged,
// exported and shown on the status page. A file no pattern matches any more leaves with its
// targets.
type inventory struct {
	logger *slog.Logger

	// mu guards files: expand writes them, the collector and the status page read them.
	mu    sync.Mutex
	files map[fileKey]*targetFile
}

// fileKey is one target file of one provider (two providers may name the same file).
type fileKey struct{ provider, path string }

// targetFile is what is known of one target file.
type targetFile struct {
	// state is the file's version the last read saw (zero: never read, or unreadable).
	state checks.FileState
	// groups are the last groups read well; good says there were some reads that went well.
	groups []config.TargetGroup
	good   bool
	// err is the last read's problem (nil: it read well), since when the file has had it.
	err      error
	errSince time.Time
}

// targets counts the targets of the last good groups.
func (f *targetFile) targets() int {
	n := 0
	for _, g := range f.groups {
		n += len(g.Targets)
	}
	return n
}

// fileProblem is one target file that does not read well, for the status page.
type fileProblem struct {
	Provider, Path string
	Err            error
	Since          time.Time
	// Kept is how many targets of its last good read the provider keeps.
	Kept int
}

// lines says what is wrong, one problem a line: a file that does not validate gives its
// problems (file:line:col: field: what is allowed), one that cannot be read the read error.
func (p fileProblem) lines() []string {
	var es config.Errors
	if errors.As(p.Err, &es) {
		ls := make([]string, len(es))
		for i, e := range es {
			ls[i] = e.Error()
		}
		return ls
	}
	return []string{fmt.Sprintf("provider %s: hostFiles: %v", p.Provider, p.Err)}
}

func newInventory(logger *slog.Logger) *inventory {
	return &inventory{logger: logger, files: map[fileKey]*targetFile{}}
}

// hasInventory reports whether a provider of cfg names target files.
func hasInventory(cfg *config.Config) bool {
	for _, p := range cfg.Providers {
		if inv, ok := p.Block.(config.Inventory); ok && len(inv.TargetFilePatterns()) > 0 {
			return true
		}
	}
	return false
}

// expand returns cfg with the targets of every provider's target files in its blocks
// (config.Inventory.WithTargets), reading the files that changed since they were last read,
// and those whose last read failed; and the warnings of the providers whose files changed (a
// host a file repeats). cfg itself is not modified.
func (in *inventory) expand(cfg *config.Config) (*config.Config, []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := &config.Config{Providers: slices.Clone(cfg.Providers)}
	seen := map[fileKey]bool{}
	var warns []string
	for i, p := range out.Providers {
		inv, ok := p.Block.(config.Inventory)
		if !ok || len(inv.TargetFilePatterns()) == 0 {
			continue
		}
		var files []config.TargetFile
		changed := false
		for _, pattern := range inv.TargetFilePatterns() {
			// The pattern was validated when the providers file loaded: Glob fails on nothing else.
			matches, _ := filepath.Glob(pattern)
			for _, path := range matches {
				key := fileKey{p.Name, path}
				if seen[key] {
					continue // two patterns match it
				}
				seen[key] = true
				f := in.files[key]
				if f == nil {
					f = &targetFile{}
					in.files[key] = f
					changed = true
				}
				if in.read(p.Name, path, f, inv.TargetProblem) {
					changed = true
				}
				if f.good {
					files = append(files, config.TargetFile{Path: path, Groups: f.groups})
				}
			}
		}
		block, warnings := inv.WithTargets(files)
		out.Providers[i].Block = block
		if changed {
			for _, w := range warnings {
				warns = append(warns, fmt.Sprintf("provider %s: hostFiles: %s", p.Name, w))
			}
		}
	}
	for key := range in.files {
		if !seen[key] {
			delete(in.files, key)
			in.logger.Info("host file no longer matched; its targets leave", "provider", key.provider, "file", key.path)
		}
	}
	return out, warns
}

// read reads f at path again when it changed or its last read failed, and reports whether its
// groups changed. A read that fails keeps the last good groups. in.mu is held.
func (in *inventory) read(provider, path string, f *targetFile, targetProblem func(string) string) bool {
	st, err := checks.StatFile(path)
	if err == nil && f.err == nil && f.good && st == f.state {
		return false
	}
	var groups []config.TargetGroup
	if err == nil {
		groups, err = config.ReadTargetFile(path, targetProblem)
	}
	if err != nil {
		if f.err == nil || f.err.Error() != err.Error() {
			f.errSince = time.Now()
			in.logger.Error("host file does not read well, keeping its last good targets",
				"provider", provider, "file", path, "targets_kept", f.targets(), "err", err)
		}
		f.err, f.state = err, checks.FileState{}
		return false
	}
	if f.err != nil {
		in.logger.Info("host file reads well again", "provider", provider, "file", path)
	}
	f.err, f.state = nil, st
	changed := !f.good || !reflect.DeepEqual(f.groups, groups)
	f.groups, f.good = groups, true
	return changed
}

// problems lists the files that do not read well, by provider and path.
func (in *inventory) problems() []fileProblem {
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var ps []fileProblem
	for _, key := range slices.SortedFunc(maps.Keys(in.files), compareKeys) {
		f := in.files[key]
		if f.err != nil {
			ps = append(ps, fileProblem{Provider: key.provider, Path: key.path, Err: f.err, Since: f.errSince, Kept: f.targets()})
		}
	}
	return ps
}

func compareKeys(a, b fileKey) int {
	if a.provider != b.provider {
		if a.provider < b.provider {
			return -1
		}
		return 1
	}
	switch {
	case a.path < b.path:
		return -1
	case a.path > b.path:
		return 1
	}
	return 0
}

var (
	hostFileReadDesc = prometheus.NewDesc(checks.MetricNamespace+"_host_file_last_read_successful",
		"Whether the last read of a provider's host file (hostFiles) succeeded (1) or failed (0: unreadable or invalid; the provider keeps the hosts of its last good read).",
		[]string{"provider", "file"}, nil)
	hostFileTargetsDesc = prometheus.NewDesc(checks.MetricNamespace+"_host_file_targets",
		"How many hosts of a provider's host file are checked: those of its last good read.",
		[]string{"provider", "file"}, nil)
)

// Describe and Collect export each target file's state.
func (in *inventory) Describe(ch chan<- *prometheus.Desc) {
	ch <- hostFileReadDesc
	ch <- hostFileTargetsDesc
}

func (in *inventory) Collect(ch chan<- prometheus.Metric) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for key, f := range in.files {
		ok := 1.0
		if f.err != nil {
			ok = 0
		}
		ch <- prometheus.MustNewConstMetric(hostFileReadDesc, prometheus.GaugeValue, ok, key.provider, key.path)
		ch <- prometheus.MustNewConstMetric(hostFileTargetsDesc, prometheus.GaugeValue, float64(f.targets()), key.provider, key.path)
	}
}

// refreshInventory reads the host files again before a round (the runner's BeforeRound) and,
// when what they list changed, gives the runner the checkers of the new lists: a kvm provider
// keeps its links to the hosts it still has (Retarget), added hosts are checked in this round,
// removed ones leave the snapshot at once. A change of labels alone (a maintenance label)
// changes no checker. No reload of the providers file: the running one is expanded again.
func (e *Exporter) refreshInventory() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.fileCfg == nil || !hasInventory(e.fileCfg) {
		return
	}
	exp, warnings := e.inventory.expand(e.fileCfg)
	for _, w := range warnings {
		e.logger.Warn("host file warning", "warning", w)
	}
	if runs(exp, e.entries) {
		return
	}
	set, err := buildCheckers(exp, e.entries, e.logger)
	if err != nil {
		e.logger.Error("host files changed but the checkers could not be built; keeping the running hosts", "err", err)
		return
	}
	e.runner.SetProviders(set.providers())
	e.entries = set.entries
	closeAll(set.retired, e.logger)
	e.logger.Info("host files changed", "changed", set.changed, "kept", set.kept, "targets", hostCounts(exp, set.entries))
}

// runs reports whether entries run exactly cfg: the same blocks and the same labels.
func runs(cfg *config.Config, entries map[string]entry) bool {
	if len(cfg.Providers) != len(entries) {
		return false
	}
	for _, p := range cfg.Providers {
		en, ok := entries[p.Name]
		if !ok || !en.provider.Equal(p) || !reflect.DeepEqual(en.labels(), (entry{provider: p}).labels()) {
			return false
		}
	}
	return true
}

// hostCounts names each provider with target files and how many targets its checker has, for
// the log.
func hostCounts(cfg *config.Config, entries map[string]entry) string {
	var parts []string
	for _, p := range cfg.Providers {
		if inv, ok := p.Block.(config.Inventory); ok && len(inv.TargetFilePatterns()) > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", p.Name, len(entries[p.Name].checker.Targets())))
		}
	}
	return strings.Join(parts, ", ")
}

// CheckHostFiles reads the host files of cfg's providers (hostFiles) as a start would: every
// problem of a file that does not read well (file:line:col), a warning for a pattern that
// matches no file and for a host a file repeats, and cfg with the files' hosts.
func CheckHostFiles(cfg *config.Config) (problems, warnings []string, expanded *config.Config) {
	in := newInventory(slog.New(slog.DiscardHandler))
	expanded, warnings = in.expand(cfg)
	for _, p := range in.problems() {
		problems = append(problems, p.lines()...)
	}
	for _, p := range cfg.Providers {
		if inv, ok := p.Block.(config.Inventory); ok {
			for _, pattern := range inv.TargetFilePatterns() {
				if m, _ := filepath.Glob(pattern); len(m) == 0 {
					warnings = append(warnings, fmt.Sprintf("provider %s: hostFiles: %s matches no file (its hosts are checked once it exists)", p.Name, pattern))
				}
			}
		}
	}
	return problems, warnings, expanded
}
