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
	"github.com/provider-health-exporter/provider-health-exporter/internal/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
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
	in := newInventory(slog.New(slog.NewTextHandler(&logs, nil)), config.DefaultLimits.TargetFileMaxSize)
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
