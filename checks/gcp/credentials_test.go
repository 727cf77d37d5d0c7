package gcp_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// staler is the optional interface the exporter's reload asks a checker about.
type staler interface{ Stale() bool }

func mustStaler(t *testing.T, c checks.Checker) staler {
	t.Helper()
	s, ok := c.(staler)
	if !ok {
		t.Fatal("the gcp checker has no Stale method: a reload would keep it whatever its key file does")
	}
	return s
}

// replaceKey writes the key file from over the one at path, as a rotated Secret does, and
// moves its modification time forward, so that the change shows even on a file system with
// coarse timestamps.
func replaceKey(t *testing.T, from, path string) {
	t.Helper()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, from, path)
	later := before.ModTime().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// TestKeyRotation: a key replaced in the same file is used from the next check on, without a
// reload, and Stale tells a reload about it.
func TestKeyRotation(t *testing.T) {
	s := gcefake.Start(t)
	path := filepath.Join(t.TempDir(), "key.json")
	copyFile(t, s.ServiceAccountKey(t), path)
	c := newChecker(t, provider(s, path), nil)
	st := mustStaler(t, c)

	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Fatalf("first key: got %s: %s", r.Reason, r.Message)
	}
	if st.Stale() {
		t.Error("Stale with the key it loaded, unchanged")
	}
	tokens := s.TokenRequests()

	// A new trusted key: the cached token of the old one would still be accepted, so only a
	// re-read of the file makes a new token exchange.
	replaceKey(t, s.ServiceAccountKey(t), path)
	if !st.Stale() {
		t.Error("not Stale after the key file was replaced")
	}
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Fatalf("rotated key: got %s: %s", r.Reason, r.Message)
	}
	if got := s.TokenRequests(); got != tokens+1 {
		t.Errorf("token requests = %d after the rotation, want %d: the new key was not used", got, tokens+1)
	}
	if st.Stale() {
		t.Error("still Stale after the check loaded the new key")
	}

	// A key the token endpoint does not trust: the next check says so.
	replaceKey(t, s.UntrustedServiceAccountKey(t), path)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonCredentialsError ||
		!strings.Contains(r.Message, "Invalid JWT Signature") {
		t.Errorf("untrusted key: got %s: %s", r.Reason, r.Message)
	}

	// A file that no longer loads: CredentialsError, Stale until it loads again.
	replaceKey(t, rewriteKey(t, path, "type", "authorized_user"), path)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonCredentialsError {
		t.Errorf("unloadable key: got %s: %s", r.Reason, r.Message)
	}
	if !st.Stale() {
		t.Error("not Stale while the credentials do not load")
	}
	replaceKey(t, s.ServiceAccountKey(t), path)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("good key again: got %s: %s", r.Reason, r.Message)
	}
	if st.Stale() {
		t.Error("Stale after the credentials loaded again")
	}
}

// TestStaleWhileCredentialsUnusable: a checker whose key never loaded asks to be rebuilt.
func TestStaleWhileCredentialsUnusable(t *testing.T) {
	s := gcefake.Start(t)
	c := newChecker(t, provider(s, filepath.Join(t.TempDir(), "missing.json")), nil)
	if !mustStaler(t, c).Stale() {
		t.Error("not Stale with a key file that does not exist")
	}
	ok := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	if mustStaler(t, ok).Stale() {
		t.Error("Stale right after loading a good key")
	}
}

// captureStderr redirects os.Stderr into a pipe until the returned function is called; the
// function restores it and returns what was written.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, r)
		close(copied)
	}()
	var once sync.Once
	stop := func() string {
		once.Do(func() {
			os.Stderr = orig
			_ = w.Close()
			<-copied
			_ = r.Close()
		})
		return out.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestSDKDebugLoggingStaysOff: with the SDK's own debug logging asked for in the environment,
// nothing the checker does writes a token, the signed assertion or the key to stderr.
func TestSDKDebugLoggingStaysOff(t *testing.T) {
	t.Setenv("GOOGLE_SDK_GO_LOGGING_LEVEL", "debug")
	s := gcefake.Start(t)
	s.AddInstances(project, "us-east1-b", 1, managed)
	key := s.ServiceAccountKey(t)
	var logs testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	stop := captureStderr(t)
	c := newChecker(t, provider(s, key), logger)
	for i, want := range []checks.Reason{checks.ReasonReady, checks.ReasonUnauthorized, checks.ReasonReady} {
		if i == 1 {
			s.RevokeTokens()
		}
		if r := check(t, c, 5*time.Second); r.Reason != want {
			t.Errorf("check %d: got %s: %s; want %s", i, r.Reason, r.Message, want)
		}
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", key)
	if r := check(t, newChecker(t, provider(s, ""), logger), 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("ADC: got %s: %s", r.Reason, r.Message)
	}
	stderr := stop()

	tokens := s.IssuedTokens()
	if len(tokens) < 2 {
		t.Fatalf("%d tokens issued, want at least 2: the test proves nothing", len(tokens))
	}
	haystack := stderr + "\n" + logs.String()
	for _, tok := range tokens {
		if strings.Contains(haystack, strings.TrimPrefix(tok, "ya29.")) {
			t.Errorf("access token %s… appears on stderr or in the logs", tok[:12])
		}
	}
	for _, line := range privateKeyLines(t, key) {
		if strings.Contains(haystack, line) {
			t.Error("private key material appears on stderr or in the logs")
			break
		}
	}
	for _, s := range []string{"PRIVATE KEY", "assertion", "2LO token"} {
		if strings.Contains(stderr, s) {
			t.Errorf("stderr holds %q: the SDK logged the token exchange", s)
		}
	}
}

// TestSlowCredentialsLookupIsCutAtTheDeadline: Application Default Credentials whose lookup
// hangs (the file is a FIFO nobody writes yet) give Timeout at the deadline, and the abandoned
// call makes no request once the lookup finishes after the deadline.
func TestSlowCredentialsLookupIsCutAtTheDeadline(t *testing.T) {
	s := gcefake.Start(t)
	s.AddInstances(project, "us-east1-b", 1, managed)
	key, err := os.ReadFile(s.ServiceAccountKey(t))
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "adc.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	// Whatever happens, release a reader still blocked on the FIFO.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", fifo)
	c := newChecker(t, provider(s, ""), nil)

	const deadline = 300 * time.Millisecond
	start := time.Now()
	r := check(t, c, deadline)
	elapsed := time.Since(start)
	if r.Reason != checks.ReasonTimeout || !strings.Contains(r.Message, "loading the credentials") {
		t.Errorf("got %s: %s; want Timeout while loading the credentials", r.Reason, r.Message)
	}
	if elapsed > deadline+500*time.Millisecond {
		t.Errorf("Check returned after %v with a %v deadline", elapsed, deadline)
	}

	// The lookup now finishes, after the deadline: the abandoned call must stop there.
	f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open the FIFO for writing (the lookup should be reading it): %v", err)
	}
	if _, err := f.Write(key); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	time.Sleep(500 * time.Millisecond)
	if n, m := s.TokenRequests(), s.InstancesRequests(); n+m != 0 {
		t.Errorf("after the deadline the abandoned check made %d token and %d instances requests", n, m)
	}

	// The credentials loaded by then serve the next check.
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("next check: got %s: %s", r.Reason, r.Message)
	}
}
