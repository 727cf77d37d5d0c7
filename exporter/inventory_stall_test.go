package exporter

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestInventoryGlobStalled: a host files pattern whose directory does not answer (a stalled
// mount: the glob blocks) is abandoned at fileread.DefaultTimeout; the provider keeps the
// files the pattern matched before, and their hosts, and the glob is not started again while
// the abandoned one is blocked.
func TestInventoryGlobStalled(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(fakechecks.HostFilesProviders(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	in := newInventory(slog.New(slog.NewTextHandler(&logs, nil)), config.DefaultLimits)
	testutil.ReplaceFile(t, filepath.Join(dir, "inventory", "a.json"), `[{"targets": ["127.0.0.2:1"]}]`)
	exp, _ := in.expand(cfg)
	before := hostsOf(t, exp)
	if len(before) != 2 {
		t.Fatalf("hosts %v, want the static one and a.json's", before)
	}

	release := make(chan struct{})
	var calls atomic.Int32
	globFiles = func(pattern string) ([]string, error) {
		calls.Add(1)
		<-release
		return filepath.Glob(pattern)
	}
	defer func() { globFiles = filepath.Glob }()
	defer close(release)

	start := time.Now()
	exp, _ = in.expand(cfg)
	took := time.Since(start)
	if got := hostsOf(t, exp); !slices.Equal(got, before) {
		t.Errorf("after a stalled glob: hosts %v, want the ones matched before %v", got, before)
	}
	if took < fileread.DefaultTimeout {
		t.Errorf("expand took %s with a stalled glob, less than its deadline %s: was it abandoned?", took, fileread.DefaultTimeout)
	}
	if !strings.Contains(logs.String(), "host files pattern not listed in time") || !strings.Contains(logs.String(), "glob did not finish") {
		t.Errorf("no log line of the abandoned glob:\n%s", logs.String())
	}
	// While it is blocked, the next expand does not glob again, nor wait.
	patterns := int32(len(cfg.Providers[0].Block.(config.Inventory).TargetFilePatterns()))
	start = time.Now()
	exp, _ = in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Equal(got, before) || calls.Load() != patterns || time.Since(start) >= fileread.DefaultTimeout {
		t.Errorf("second expand: hosts %v, %d globs, %s: want the same hosts, one glob per pattern (%d), no wait", got, calls.Load(), time.Since(start), patterns)
	}
}

// TestInventoryTargetCeiling: with --config.max-targets=2, a host file of 3 targets is refused
// (its provider keeps the hosts of its last good read, its problem names the flag), and a
// file that would take the provider's files past 2 targets is left out with a warning.
func TestInventoryTargetCeiling(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(fakechecks.HostFilesProviders(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	l := config.DefaultLimits
	l.MaxTargets = 2
	in := newInventory(slog.New(slog.DiscardHandler), l)
	a := filepath.Join(dir, "inventory", "a.json")
	b := filepath.Join(dir, "inventory", "b.yml")
	testutil.ReplaceFile(t, a, `[{"targets": ["127.0.0.2:1", "127.0.0.3:1"]}]`)
	exp, _ := in.expand(cfg)
	good := hostsOf(t, exp)
	if len(good) != 3 {
		t.Fatalf("hosts %v, want the static one and a.json's two", good)
	}
	testutil.ReplaceFile(t, a, `[{"targets": ["127.0.0.2:1", "127.0.0.3:1", "127.0.0.4:1"]}]`)
	exp, _ = in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Equal(got, good) {
		t.Errorf("a.json over the ceiling: hosts %v, want its last good ones %v", got, good)
	}
	if ps := in.problems(); len(ps) != 1 || !strings.Contains(ps[0].Err.Error(), "more than 2 targets in this file (--config.max-targets)") {
		t.Errorf("problems %v, want a.json's naming the ceiling", ps)
	}
	testutil.ReplaceFile(t, a, `[{"targets": ["127.0.0.2:1", "127.0.0.3:1"]}]`)
	testutil.ReplaceFile(t, b, "- targets: ['127.0.0.9:1']\n")
	exp, warns := in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Equal(got, good) {
		t.Errorf("b.yml past the provider's ceiling: hosts %v, want a.json's only %v", got, good)
	}
	if !slices.ContainsFunc(warns, func(w string) bool {
		return strings.Contains(w, "b.yml: its 1 targets would take the provider past 2 targets")
	}) {
		t.Errorf("warnings %v, want one leaving b.yml out", warns)
	}
}
