package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// sudoSecurePath is the PATH Debian's sudo gives a command (secure_path in /etc/sudoers): it
// leaves out /usr/local/go/bin, where Go's own installer puts go.
const sudoSecurePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// TestMakeFindsGoUnderSudo: `sudo make demo`, as README.md and docs/demo.md say to run it, runs
// make with sudo's secure_path. The Makefile must still find go (at /usr/local/go/bin) for its
// own recipes, and put it on PATH for the scripts and programs they run (scripts/build-kube.sh
// runs `go run`, the demo launcher renders the mixin with `go tool`).
func TestMakeFindsGoUnderSudo(t *testing.T) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		testenv.Unavailable(t, "no make on PATH: install Debian's make package")
	}
	const installed = "/usr/local/go/bin/go"
	if _, err := os.Stat(installed); err != nil {
		t.Skipf("Go is not installed at %s (where the Makefile looks when go is not on PATH): %v", installed, err)
	}
	env := []string{"PATH=" + sudoSecurePath, "HOME=" + t.TempDir(), "LANG=C"}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(makePath, append([]string{"--no-print-directory"}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s with PATH=%s: %v\n%s", strings.Join(args, " "), sudoSecurePath, err, out)
		}
		return string(out)
	}

	// The recipes' own go: an absolute path to a go that runs.
	var goCmd string
	for _, line := range strings.Split(run("-n", "demo"), "\n") {
		if strings.Contains(line, " tool -modfile=tools/go.mod promu build") {
			goCmd, _, _ = strings.Cut(line, " ")
		}
	}
	if !filepath.IsAbs(goCmd) {
		t.Fatalf("make -n demo runs promu through %q, want the absolute path of go (sudo's PATH has no go)", goCmd)
	}
	// What the recipes' children find on PATH.
	found := strings.TrimSpace(run("-s", "--eval", "phe-which-go: ; @command -v go", "phe-which-go"))
	if !filepath.IsAbs(found) {
		t.Fatalf("a recipe finds no go on PATH (got %q)", found)
	}
	for _, g := range []string{goCmd, found} {
		if out, err := exec.Command(g, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "go version ") {
			t.Errorf("%s version: %v\n%s", g, err, out)
		}
	}
}

// TestMakeTestUnitNeedsOnlyGo: `make test-unit` (README.md, docs/testing.md) runs go test -short
// in both modules and nothing else: none of the steps `make test` takes first (the Debian
// packages, which need root, and the kube and Prometheus builds into bin/), and no
// REQUIRE_INTEGRATION, so it works on a machine with nothing but Go.
func TestMakeTestUnitNeedsOnlyGo(t *testing.T) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		testenv.Unavailable(t, "no make on PATH: install Debian's make package")
	}
	cmd := exec.Command(makePath, "--no-print-directory", "-n", "test-unit")
	cmd.Env = append(os.Environ(), "REQUIRE_INTEGRATION=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test-unit: %v\n%s", err, out)
	}
	var root, mixin bool
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, command, inMixin := strings.Cut(line, " && ")
		if !inMixin {
			command = dir
		} else if dir != "cd mixin" {
			t.Errorf("make test-unit runs %q, want go test in this module or cd mixin", line)
		}
		fields := strings.Fields(command)
		if len(fields) < 2 || filepath.Base(fields[0]) != "go" || fields[1] != "test" ||
			!strings.Contains(command, " -short ") || !strings.HasSuffix(command, " ./...") ||
			strings.Contains(command, "REQUIRE_INTEGRATION") {
			t.Errorf("make test-unit runs %q, want only go test -short ... ./... (no install or build step, no REQUIRE_INTEGRATION)", line)
			continue
		}
		if inMixin {
			mixin = true
		} else {
			root = true
		}
	}
	if !root || !mixin {
		t.Errorf("make test-unit tests this module: %v, the mixin's: %v; want both:\n%s", root, mixin, out)
	}
}

// TestDefaultMakeInstallsNothing: a bare `make` (the default goal, `all`) lints, runs the unit
// tests and builds, as Makefile.common's `common-all` does in the Prometheus projects: it
// installs no Debian package (which needs root), builds none of the test environment's binaries
// into bin/ and starts no real system (every go test it runs is -short).
func TestDefaultMakeInstallsNothing(t *testing.T) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		testenv.Unavailable(t, "no make on PATH: install Debian's make package")
	}
	out, err := exec.Command(makePath, "--no-print-directory", "-n").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n: %v\n%s", err, out)
	}
	var tested, built bool
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, bad := range []string{"install-test-deps", "apt-get", "build-kube", "build-promstack", "sudo"} {
			if strings.Contains(line, bad) {
				t.Errorf("make (the default goal) runs %q: it must install and build nothing beyond the exporter", line)
			}
		}
		if strings.Contains(line, "go test") || strings.Contains(line, "go' test") {
			tested = true
			if !strings.Contains(line, " -short ") {
				t.Errorf("make (the default goal) runs %q: its tests must be the unit tests (-short)", line)
			}
		}
		if strings.Contains(line, "promu build") {
			built = true
		}
	}
	if !tested || !built {
		t.Errorf("make (the default goal) runs the unit tests: %v, builds the exporter: %v; want both:\n%s", tested, built, out)
	}
}
