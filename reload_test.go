package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	itestutil "github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
)

// labFile is a providers file of one kvm provider "lab" with one host, hv1, on a closed port,
// whose labels are hostLabels (a YAML flow mapping).
func labFile(hostLabels string) string {
	return `providers:
- name: lab
  type: kvm
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hosts: [{address: "127.0.0.1:1", name: hv1, labels: ` + hostLabels + `}]
`
}

// TestAutoReload: with --config.auto-reload, the round after the providers file changed runs
// the reloaded file (a maintenance label set in it applies without SIGHUP); a bad file keeps the
// running providers, is reported, and is not tried again until it changes; without the flag a
// changed file waits for a reload.
func TestAutoReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "providers.yml")
	writeFile(t, path, labFile("{rack: r1}"))
	var logs strings.Builder
	e, err := newExporter(path, time.Minute, 15*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	labelOf := func(name string) string { return e.runner.Current().Providers[0].Labels.Of("hv1")[name] }

	writeFile(t, path, labFile(`{rack: r1, maintenance: "true"}`))
	e.beforeRound()
	if got := labelOf("maintenance"); got != "" {
		t.Errorf("without --config.auto-reload the changed file applied (maintenance=%q)", got)
	}

	e.autoReload = true
	e.beforeRound()
	if got := labelOf("maintenance"); got != "true" {
		t.Fatalf("the round after the change: maintenance=%q, want the reloaded file's true", got)
	}
	reloads := strings.Count(logs.String(), "providers file reloaded")
	e.beforeRound()
	if n := strings.Count(logs.String(), "providers file reloaded"); n != reloads {
		t.Errorf("an unchanged file was reloaded again (%d reloads, were %d)", n, reloads)
	}

	writeFile(t, path, "providers: [\n")
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
	writeFile(t, path, labFile("{rack: r2}"))
	e.beforeRound()
	if got, m := labelOf("rack"), labelOf("maintenance"); got != "r2" || m != "" || testutil.ToFloat64(e.reloadSuccess) != 1 {
		t.Errorf("the file back: rack=%q maintenance=%q success %v, want r2, none, 1", got, m, testutil.ToFloat64(e.reloadSuccess))
	}
}

// TestAutoReloadFlag: the exporter started with --config.auto-reload applies a maintenance
// label written into its providers file from a following round, with no signal and no POST.
func TestAutoReloadFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "providers.yml")
	writeFile(t, path, labFile("{}"))
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s", "--config.auto-reload")
	metrics := func() string { _, m := x.get("/metrics"); return m }
	itestutil.Eventually(t, 30*time.Second, "hv1 checked (KeyMaterialError)", func() bool { return reasonOf(metrics(), "hv1") == "KeyMaterialError" })
	writeFile(t, path, labFile(`{maintenance: "true"}`))
	itestutil.Eventually(t, 30*time.Second, "hv1 in Maintenance without a reload signal", func() bool { return reasonOf(metrics(), "hv1") == "Maintenance" })
	if !strings.Contains(x.logs.String(), "providers file changed, reloading (--config.auto-reload)") {
		t.Errorf("no log line of the auto-reload:\n%s", x.logs.String())
	}
}
