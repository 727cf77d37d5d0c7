package mixin_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The mixin tests run the same jsonnet, jsonnetfmt and jsonnet-lint as `make mixin` (go-jsonnet
// pinned in tools/go.mod, run through `go tool`), so a drift found here is exactly what
// `make mixin` fixes, and go-jsonnet never enters a module's requirements twice.

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = ".."

// fmtFlags are node-mixin's jsonnetfmt settings (the Makefile's JSONNETFMT).
var fmtFlags = []string{"-n", "2", "--max-blank-lines", "2", "--string-style", "s", "--comment-style", "s"}

// goTool runs `go tool -modfile=tools/go.mod name args...` in the repository root and returns
// its stdout; stderr is in the error.
func goTool(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=tools/go.mod", name}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("go tool %s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

// jsonnet renders an entry point of the mixin (relative to mixin/) with _config overridden by
// config (jsonnet code, "" for none) and returns its output.
func jsonnet(t *testing.T, entry, config string, extra ...string) []byte {
	t.Helper()
	args := append([]string{"-J", "mixin"}, extra...)
	if config != "" {
		args = append(args, "--tla-code", "config="+config)
	}
	out, err := goTool(t, "jsonnet", append(args, filepath.Join("mixin", entry))...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sources lists the mixin's jsonnet sources, relative to the repository root.
func sources(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".jsonnet") || strings.HasSuffix(p, ".libsonnet")) {
			files = append(files, filepath.Join("mixin", p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v as the mixin's sources", files)
	}
	return files
}

// unavailable mirrors test/testenv.Unavailable: a missing part fails under REQUIRE_INTEGRATION=1
// (except under -short) and skips otherwise (this module cannot import the main module's internal
// packages).
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("REQUIRE_INTEGRATION") == "1" && !testing.Short() {
		t.Fatalf("REQUIRE_INTEGRATION=1 and a part of the test environment is missing: %s", msg)
	}
	t.Skipf("skipped: %s", msg)
}

// promtool returns the Prometheus 3 promtool: PROMTOOL_BIN, or the one the main module's
// builder puts into bin/ (building it on first use: `make prom-binaries` does it beforehand).
// Under -short it skips the test, as test/testenv.SkipIfShort does.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL_BIN"); p != "" && !testing.Short() {
		return p
	}
	return promBinaries(t)[1]
}

// promBinaries returns the paths of Prometheus 3, promtool, Alertmanager and amtool that the
// main module's builder puts into bin/ (building them on first use), as promtool does.
func promBinaries(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped: runs promtool (Prometheus 3, built from the Go module proxy) (-short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./test/testenv/promstack/cmd/build-promstack")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "module proxy is not reachable") || strings.Contains(stderr.String(), "go command is not on PATH") {
			unavailable(t, "promtool cannot be built here (make prom-binaries): %s", stderr.String())
		}
		t.Fatalf("build-promstack: %v\n%s", err, stderr.String())
	}
	lines := strings.Fields(stdout.String())
	if len(lines) != 4 {
		t.Fatalf("build-promstack printed %q, want four paths", stdout.String())
	}
	return lines
}

// runbookAnchors returns the anchors GitHub gives the headings of docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := drop.ReplaceAllString(strings.ToLower(h), "")
		anchors[strings.ReplaceAll(a, " ", "-")] = true
	}
	return anchors
}
