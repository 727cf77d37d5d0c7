package exporter

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestAutoReload: with --config.auto-reload, the round after the providers file changed runs
// the reloaded file (a maintenance label set in it applies without SIGHUP); a bad file keeps the
// running providers, is reported, and is not tried again until it changes; without the flag a
// changed file waits for a reload.
func TestAutoReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "providers.yml")
	itestutil.ReplaceFile(t, path, fakechecks.ClosedPortKVM("{rack: r1}"))
	var logs strings.Builder
	e, err := New(path, time.Minute, 15*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	labelOf := func(name string) string { return e.runner.Current().Providers[0].Labels.Of("hv1")[name] }

	itestutil.ReplaceFile(t, path, fakechecks.ClosedPortKVM(`{rack: r1, maintenance: "true"}`))
	e.beforeRound()
	if got := labelOf("maintenance"); got != "" {
		t.Errorf("without --config.auto-reload the changed file applied (maintenance=%q)", got)
	}

	e.AutoReload = true
	e.beforeRound()
	if got := labelOf("maintenance"); got != "true" {
		t.Fatalf("the round after the change: maintenance=%q, want the reloaded file's true", got)
	}
	reloads := strings.Count(logs.String(), "providers file reloaded")
	e.beforeRound()
	if n := strings.Count(logs.String(), "providers file reloaded"); n != reloads {
		t.Errorf("an unchanged file was reloaded again (%d reloads, were %d)", n, reloads)
	}

	itestutil.ReplaceFile(t, path, "providers: [\n")
	for range 3 {
		e.beforeRound()
	}
	if n := strings.Count(logs.String(), "reload failed"); n != 1 {
		t.Errorf("a bad file was tried %d times while unchanged, want once:\n%s", n, logs.String())
	}
	if v := testutil.ToFloat64(e.reloadSuccess); v != 0 {
		t.Errorf("config_last_reload_successful %v after a bad file, want 0", v)
	}
	if got := labelOf("rack"); got != "r1" {
		t.Errorf("a bad file changed the running providers: rack=%q", got)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	e.beforeRound()
	e.beforeRound()
	if n := strings.Count(logs.String(), "reload failed"); n != 2 {
		t.Errorf("a deleted file: %d failed reloads in all, want one more than the bad file's", n)
	}
	itestutil.ReplaceFile(t, path, fakechecks.ClosedPortKVM("{rack: r2}"))
	e.beforeRound()
	if got, m := labelOf("rack"), labelOf("maintenance"); got != "r2" || m != "" || testutil.ToFloat64(e.reloadSuccess) != 1 {
		t.Errorf("the file back: rack=%q maintenance=%q success %v, want r2, none, 1", got, m, testutil.ToFloat64(e.reloadSuccess))
	}
}
