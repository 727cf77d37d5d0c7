package exporter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// specialFiles puts a FIFO, a socket and a symlink to /dev/zero into dir, named to match the
// host file globs.
func specialFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo.yml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.json")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	zero := filepath.Join(dir, "zero.yml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	return map[string]string{fifo: "a named pipe (FIFO)", sock: "a socket", zero: "a character device"}
}

// TestInventorySpecialFiles: a FIFO, a socket and /dev/zero in a host glob are each refused at
// once, by name and kind, and the good file of the same glob still gives its hosts.
func TestInventorySpecialFiles(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(fakechecks.HostFilesProviders(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(dir, "inventory")
	special := specialFiles(t, inv)
	testutil.ReplaceFile(t, filepath.Join(inv, "good.json"), `[{"targets": ["127.0.0.2:1"]}]`)
	in := newInventory(slog.New(slog.DiscardHandler), config.DefaultLimits)
	exp, _ := in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Equal(got, []string{"hv-static{}", "127.0.0.2:1{}"}) {
		t.Errorf("hosts %v; want the static host and the good file's", got)
	}
	ps := in.problems()
	if len(ps) != len(special) {
		t.Fatalf("problems %+v; want one per special file", ps)
	}
	for _, p := range ps {
		kind := special[p.Path]
		if want := p.Path + " is " + kind + ", not a regular file"; !strings.Contains(p.lines()[0], want) {
			t.Errorf("problem %q; want it to say %q", p.lines()[0], want)
		}
	}
}

// TestInventoryParsesOncePerVersion: an invalid host file is parsed once per version: its
// version is remembered with the failure, and a new version is read again.
func TestInventoryParsesOncePerVersion(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(fakechecks.HostFilesProviders(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "inventory", "a.yml")
	testutil.ReplaceFile(t, path, "- targets: [\"not an address\"]\n")
	in := newInventory(slog.New(slog.DiscardHandler), config.DefaultLimits)
	in.expand(cfg)
	st, err := checks.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key := fileKey{"kvm-inv", path}
	if f := in.files[key]; f.err == nil || f.state != st {
		t.Fatalf("after an invalid read: err %v, state kept %v; want the failure kept with the file's version", f.err, f.state == st)
	}
	f := *in.files[key]
	if in.read(key, &f, nil) || f.err == nil || !f.errSince.Equal(in.files[key].errSince) || f.state != st {
		t.Errorf("the same version read again: state or error changed")
	}
	testutil.ReplaceFile(t, path, "- targets: [\"127.0.0.9:1\"]\n")
	exp, _ := in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Contains(got, "127.0.0.9:1{}") {
		t.Errorf("a new version was not read: hosts %v", got)
	}
}

// bomb is a host file of about 32 KB: one anchored list of 1,000 bad targets reused 1,000 times.
func bomb() string {
	var b strings.Builder
	b.WriteString("- targets: &bad [" + strings.TrimSuffix(strings.Repeat(`"bad address",`, 1000), ",") + "]\n")
	b.WriteString(strings.Repeat("- targets: *bad\n", 1000))
	return b.String()
}

// TestAnswersBoundedForAliasBomb: with the alias bomb as a host file, the status page, the
// status API and the log stay small; with many bad providers, so does the reload answer.
func TestAnswersBoundedForAliasBomb(t *testing.T) {
	dir := t.TempDir()
	path := fakechecks.HostFilesProviders(t, dir)
	testutil.ReplaceFile(t, filepath.Join(dir, "inventory", "bomb.yml"), bomb())
	var logs testutil.SyncBuffer
	e, err := New(path, time.Minute, 15*time.Second, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	e.Lifecycle = true
	h := e.Handler()
	get := func(method, target string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		return rec.Code, rec.Body.String()
	}
	for _, target := range []string{"/", "/api/v1/status"} {
		code, body := get(http.MethodGet, target)
		if code != http.StatusOK || !strings.Contains(body, "more problems") || len(body) > 64<<10 {
			t.Errorf("GET %s: %d, %d bytes, counts the rest: %v; want 200, at most 64 KiB, the count of the rest", target, code, len(body), strings.Contains(body, "more problems"))
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 64<<10 {
			t.Errorf("a log line of %d bytes; want at most 64 KiB", len(line))
		}
	}

	var b strings.Builder
	b.WriteString("providers:\n")
	for range 5000 {
		b.WriteString("- {name: Bad_Name, type: nope}\n")
	}
	testutil.ReplaceFile(t, path, b.String())
	code, body := get(http.MethodPost, "/-/reload")
	if code != http.StatusInternalServerError || !strings.Contains(body, "more problems") || len(body) > 16<<10 {
		t.Errorf("reload of a bad file: %d, %d bytes; want 500 with the count of the rest, at most 16 KiB:\n%.2000s", code, len(body), body)
	}
}

// TestReadyWhileRoundsRun: /-/ready answers 200 after the first round, 503 once no round has
// started for two intervals plus the timeout (Working says so too, so that a sharded replica
// releases its Lease), 503 with the reason while the Readiness hook (the shard's) refuses, and
// 503 from the start of a shutdown.
func TestReadyWhileRoundsRun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "providers.yml")
	testutil.ReplaceFile(t, path, fakechecks.ClosedPortKVM("{}"))
	e, err := New(path, time.Minute, 15*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Working(); err != nil {
		t.Errorf("before any round: Working says %v, want nothing (starting)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Runner().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; e.Close() })
	ready := func() (int, string) {
		rec := httptest.NewRecorder()
		e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/-/ready", nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	<-e.Runner().FirstRound()
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("after the first round: %d %q; want 200", code, body)
	}
	e.roundStarted.Store(time.Now().Add(-(2*time.Minute + 15*time.Second + time.Second)).UnixNano())
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "no round of checks has started for 2m16s") {
		t.Errorf("rounds stalled: %d %q; want 503 saying since when", code, body)
	}
	if err := e.Working(); err == nil || !strings.Contains(err.Error(), "no round of checks has started for 2m16s") {
		t.Errorf("rounds stalled: Working says %v, want an error saying since when", err)
	}
	e.roundStarted.Store(time.Now().UnixNano())
	if err := e.Working(); err != nil {
		t.Errorf("after a round started: Working says %v", err)
	}
	e.Readiness = func() error { return errors.New("the members of the shard could not be read yet") }
	if code, body := ready(); code != http.StatusServiceUnavailable || body != "Not ready: the members of the shard could not be read yet\n" {
		t.Errorf("the Readiness hook refusing: %d %q; want 503 with its reason", code, body)
	}
	e.Readiness = func() error { return nil }
	if code, body := ready(); code != http.StatusOK {
		t.Errorf("the Readiness hook agreeing: %d %q; want 200", code, body)
	}
	e.Stopping()
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("shutting down: %d %q; want 503", code, body)
	}
}
