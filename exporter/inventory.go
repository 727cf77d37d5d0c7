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
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
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

	// maxSize bounds each file's read (--config.host-file-max-size); maxTargets the targets
	// of one file, and of one provider's files together (--config.max-targets).
	maxSize    int64
	maxTargets int
}

// fileKey is one target file of one provider (two providers may name the same file).
type fileKey struct{ provider, path string }

// targetFile is what is known of one target file.
type targetFile struct {
	// state is the file's version the last read saw (zero: never read, or its last read failed
	// for a reason to try again: see versioned).
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

func newInventory(logger *slog.Logger, l config.Limits) *inventory {
	return &inventory{logger: logger, files: map[fileKey]*targetFile{}, maxSize: l.TargetFileMaxSize, maxTargets: l.MaxTargets}
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
// (config.Inventory.WithTargets), reading the files that changed since they were last read
// (a file whose last read failed for a reason its version explains, invalid, too large or not
// a regular file, is not read again until it changes); and the warnings of the providers whose
// files changed (a host a file repeats). cfg itself is not modified. The files are globbed and
// read without in.mu, so that the status page and the metrics never wait on a read; callers
// serialize expand (the exporter's reload slot).
func (in *inventory) expand(cfg *config.Config) (*config.Config, []string) {
	out := &config.Config{Providers: slices.Clone(cfg.Providers)}
	type match struct {
		key           fileKey
		targetProblem func(string) string
	}
	var matches []match
	byProvider := make([][]fileKey, len(out.Providers))
	seen := map[fileKey]bool{}
	for i, p := range out.Providers {
		inv, ok := p.Block.(config.Inventory)
		if !ok {
			continue
		}
		for _, pattern := range inv.TargetFilePatterns() {
			paths := in.glob(p.Name, pattern)
			for _, path := range paths {
				key := fileKey{p.Name, path}
				if seen[key] {
					continue // two patterns match it
				}
				seen[key] = true
				matches = append(matches, match{key, inv.TargetProblem})
				byProvider[i] = append(byProvider[i], key)
			}
		}
	}

	in.mu.Lock()
	known := make(map[fileKey]targetFile, len(matches))
	for _, m := range matches {
		if f := in.files[m.key]; f != nil {
			known[m.key] = *f
		}
	}
	in.mu.Unlock()

	changed := map[fileKey]bool{}
	for _, m := range matches {
		f, had := known[m.key]
		if in.read(m.key, &f, m.targetProblem) || !had {
			changed[m.key] = true
		}
		known[m.key] = f
	}

	in.mu.Lock()
	for key, f := range known {
		in.files[key] = &f
	}
	for key := range in.files {
		if !seen[key] {
			delete(in.files, key)
			in.logger.Info("host file no longer matched; its targets leave", "provider", key.provider, "file", key.path)
		}
	}
	in.mu.Unlock()

	var warns []string
	for i, p := range out.Providers {
		inv, ok := p.Block.(config.Inventory)
		if !ok || len(inv.TargetFilePatterns()) == 0 {
			continue
		}
		var files []config.TargetFile
		providerChanged := false
		total := 0
		for _, key := range byProvider[i] {
			f := known[key]
			providerChanged = providerChanged || changed[key]
			if !f.good {
				continue
			}
			// The provider's files together take at most maxTargets targets: a file that
			// would pass the ceiling is left out, in the files' order.
			n := f.targets()
			if in.maxTargets > 0 && total+n > in.maxTargets {
				if providerChanged {
					warns = append(warns, fmt.Sprintf("provider %s: hostFiles: %s: its %d targets would take the provider past %d targets (--%s); the file is left out",
						p.Name, key.path, n, in.maxTargets, config.FlagMaxTargets))
				}
				continue
			}
			total += n
			files = append(files, config.TargetFile{Path: key.path, Groups: f.groups})
		}
		block, warnings := inv.WithTargets(files)
		out.Providers[i].Block = block
		if providerChanged {
			for _, w := range capLines(warnings, config.MaxProblems) {
				warns = append(warns, fmt.Sprintf("provider %s: hostFiles: %s", p.Name, w))
			}
		}
	}
	return out, warns
}

// glob returns the files pattern matches, within fileread.DefaultTimeout (a directory on a
// stalled network mount). A glob abandoned at its deadline logs why and matches the files of
// the provider it matched before (in.files), so that their targets stay until it answers.
func (in *inventory) glob(provider, pattern string) []string {
	// The pattern was validated when the providers file loaded: Glob fails on nothing else.
	paths, err := fileread.Bounded("glob", "glob:"+pattern, fileread.DefaultTimeout, func() ([]string, error) {
		return globFiles(pattern)
	})
	if err == nil {
		return paths
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for key := range in.files {
		if ok, _ := filepath.Match(pattern, key.path); ok && key.provider == provider {
			paths = append(paths, key.path)
		}
	}
	slices.Sort(paths)
	in.logger.Error("host files pattern not listed in time, keeping the files it matched before",
		"provider", provider, "pattern", pattern, "files_kept", len(paths), "err", err)
	return paths
}

// globFiles is filepath.Glob; a test blocks it to see the deadline work.
var globFiles = filepath.Glob

// read reads f at path again when it changed since its last read, and reports whether its
// groups changed. A read that fails keeps the last good groups; its version is remembered when
// it explains the failure (the file's content or kind), so that an invalid file is parsed once
// per version, not at every round. Called without in.mu: f is the caller's copy.
func (in *inventory) read(key fileKey, f *targetFile, targetProblem func(string) string) bool {
	st, err := checks.StatFile(key.path)
	if err == nil && st == f.state {
		return false
	}
	var groups []config.TargetGroup
	if err == nil {
		groups, err = config.ReadTargetFile(key.path, in.maxSize, in.maxTargets, targetProblem)
	}
	if err != nil {
		if f.err == nil || f.err.Error() != err.Error() {
			f.errSince = time.Now()
			in.logger.Error("host file does not read well, keeping its last good targets",
				"provider", key.provider, "file", key.path, "targets_kept", f.targets(), "err", err)
		}
		f.err, f.state = err, checks.FileState{}
		if versioned(err) {
			f.state = st
		}
		return false
	}
	if f.err != nil {
		in.logger.Info("host file reads well again", "provider", key.provider, "file", key.path)
	}
	f.err, f.state = nil, st
	changed := !f.good || !reflect.DeepEqual(f.groups, groups)
	f.groups, f.good = groups, true
	return changed
}

// versioned reports whether a read's failure follows from the file's version (its content,
// size or kind), so that reading the same version again would fail the same way: a file that
// does not validate, is too large or is not a regular file. Other failures (permissions, a
// read abandoned at its deadline) are tried again at the next refresh.
func versioned(err error) bool {
	var (
		es config.Errors
		nr *fileread.NotRegularError
		tl *fileread.TooLargeError
	)
	return errors.As(err, &es) || errors.As(err, &nr) || errors.As(err, &tl)
}

// capLines keeps at most n lines, the last saying how many more there were.
func capLines(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	return append(slices.Clip(lines[:n]), fmt.Sprintf("and %d more", len(lines)-n))
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
//
// It runs only when no reload is running (a reload reads the host files itself), and reads and
// builds without e.mu, so that /probe and the status page never wait on a host file.
func (e *Exporter) refreshInventory() {
	if !e.tryReloadSlot() {
		return
	}
	defer e.releaseReloadSlot()
	fileCfg, entries, closed := e.running()
	if closed || fileCfg == nil || !hasInventory(fileCfg) {
		return
	}
	exp, warnings := e.inventory.expand(fileCfg)
	for _, w := range warnings {
		e.logger.Warn("host file warning", "warning", w)
	}
	if runs(exp, entries) {
		return
	}
	set, err := buildCheckers(exp, entries, e.logger)
	if err != nil {
		e.logger.Error("host files changed but the checkers could not be built; keeping the running hosts", "err", err)
		return
	}
	if err := e.install(set, false); err != nil {
		return
	}
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
func CheckHostFiles(cfg *config.Config, limits config.Limits) (problems, warnings []string, expanded *config.Config) {
	in := newInventory(slog.New(slog.DiscardHandler), limits)
	expanded, warnings = in.expand(cfg)
	for _, p := range in.problems() {
		problems = append(problems, p.lines()...)
	}
	for _, p := range cfg.Providers {
		if inv, ok := p.Block.(config.Inventory); ok {
			for _, pattern := range inv.TargetFilePatterns() {
				if m := in.glob(p.Name, pattern); len(m) == 0 {
					warnings = append(warnings, fmt.Sprintf("provider %s: hostFiles: %s matches no file (its hosts are checked once it exists)", p.Name, pattern))
				}
			}
		}
	}
	return problems, warnings, expanded
}
