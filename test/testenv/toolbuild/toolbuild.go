// Package toolbuild builds, once, the binaries of a tools module (kube-apiserver and etcd,
// Prometheus and promtool, Alertmanager) into a versioned cache directory under the repository's
// bin/, for the test environment to run. Concurrent builders, in this process or others, wait on
// a lock file instead of building twice; a build says every 30 seconds that it is still going.
package toolbuild

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// Target is one main package a Spec builds, and the file name it gets in the cache directory.
type Target struct {
	Pkg, File string
}

// Spec describes what to build.
type Spec struct {
	// Name prefixes the cache directory (bin/<Name>-<version>[+<tag>...]/), the lock file
	// (bin/.<Name>-build.lock) and every log line.
	Name string
	// ToolsDir is the tools module's directory, relative to the repository root.
	ToolsDir string
	// VersionModule is the module whose version, as the tools module's go.mod requires it,
	// names the cache directory (e.g. k8s.io/kubernetes).
	VersionModule string
	// Targets are the main packages to build.
	Targets []Target
	// Tags are build tags; they are part of the cache stamp and of the cache directory's
	// name (see cacheDir).
	Tags []string
	// LDFlags returns the -ldflags arguments for the version VersionModule is required at
	// (version stamping); nil means none.
	LDFlags func(version string) []string
	// BuildHint is the command that builds the binaries beforehand, named in errors.
	BuildHint string
}

// stampFile records what a cache directory was built from; a directory whose stamp does not
// match the tools module's go.mod, the build tags and the Go version is rebuilt. go.sum is left
// out: go.mod alone decides what is built, and a build with -mod=mod may add lines to go.sum.
const stampFile = "stamp"

// progressEvery is how often a running build says it is still going.
const progressEvery = 30 * time.Second

// The build failures that mean this machine cannot build the binaries, as opposed to a bug in
// a tools module or in this package: Ensure's error wraps one of them when so.
var (
	// ErrNoGo: the go command is not installed.
	ErrNoGo = errors.New("the go command is not on PATH: install Go to build the test environment's binaries")
	// ErrNoModuleProxy: go could not download the modules to build from.
	ErrNoModuleProxy = errors.New("the Go module proxy is not reachable")
)

// ErrNotBuilt: the binaries are missing or stale, and this process may not build them
// (MayBuild): a plain go test never spends minutes building before its first result. Ensure's
// error wraps it with one line saying how to build them.
var ErrNotBuilt = errors.New("not built yet")

// BuildEnv is the environment variable that lets a test binary build the binaries it needs
// (BuildEnv=1), as REQUIRE_INTEGRATION=1 does.
const BuildEnv = "BUILD_TEST_ENV"

// MayBuild reports whether Ensure may build missing binaries: always outside a test binary (the
// make targets, their build commands and the demo); in a test binary only under
// REQUIRE_INTEGRATION=1 (make test, CI) or BUILD_TEST_ENV=1. Otherwise a test whose binaries
// are not built skips, saying to run make test-env.
func MayBuild() bool {
	return !testing.Testing() || testenv.RequireIntegration() || os.Getenv(BuildEnv) == "1"
}

// networkFailures are what go prints when it cannot reach the module proxy (or is told not to).
var networkFailures = []string{
	"dial tcp", "no such host", "connection refused", "network is unreachable", "i/o timeout",
	"TLS handshake timeout", "connection reset by peer", "proxyconnect", "GOPROXY=off",
}

// downloadFailed reports whether go's output says a module could not be downloaded.
func downloadFailed(out string) bool {
	for _, s := range networkFailures {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// Ensure returns the paths of spec's binaries (in the order of spec.Targets), building them
// first when the cache under bin/<Name>-<version>[+<tag>...]/ (cacheDir) at the repository root is missing or stale.
// Only the first run pays for the build; logf receives a line when the build starts, every 30
// seconds while it runs and when it ends. A build that ctx cuts short keeps its compiled
// packages in Go's build cache, so the next attempt resumes where it stopped. An error that
// wraps ErrNoGo or ErrNoModuleProxy means this machine cannot build them; any other is a bug.
func Ensure(ctx context.Context, spec Spec, logf func(format string, args ...any)) ([]string, error) {
	root, err := RepoRoot(spec.ToolsDir)
	if err != nil {
		return nil, err
	}
	return ensure(ctx, root, spec, logf)
}

func ensure(ctx context.Context, root string, spec Spec, logf func(string, ...any)) ([]string, error) {
	modDir := filepath.Join(root, spec.ToolsDir)
	version, stamp, err := identity(modDir, spec)
	if err != nil {
		return nil, err
	}
	binRoot := filepath.Join(root, "bin")
	dir := filepath.Join(binRoot, cacheDir(spec, version))
	paths := make([]string, len(spec.Targets))
	for i, t := range spec.Targets {
		paths[i] = filepath.Join(dir, t.File)
	}
	if err := os.MkdirAll(binRoot, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", binRoot, err)
	}
	// bin/ holds only built artefacts: keep it out of version control on its own.
	if ignore := filepath.Join(binRoot, ".gitignore"); !exists(ignore) {
		_ = os.WriteFile(ignore, []byte("*\n"), 0o644)
	}
	if upToDate(dir, stamp, spec) {
		return paths, nil
	}
	if !MayBuild() {
		return nil, fmt.Errorf("%s: %w in %s: run make test-env once (it builds every binary the integration tests run; several minutes the first time), or set REQUIRE_INTEGRATION=1 or %s=1 to build on first use",
			what(spec), ErrNotBuilt, dir, BuildEnv)
	}

	unlock, err := lockFile(ctx, filepath.Join(binRoot, "."+spec.Name+"-build.lock"), spec, logf)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have finished the build while this one waited for the lock.
	if upToDate(dir, stamp, spec) {
		return paths, nil
	}
	if err := build(ctx, modDir, binRoot, dir, version, stamp, spec, logf); err != nil {
		return nil, err
	}
	return paths, nil
}

// RepoRoot finds the repository root: the nearest ancestor of the working directory that holds
// toolsDir/go.mod. Tests run in their package's directory, so this works from any package.
func RepoRoot(toolsDir string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, toolsDir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s/go.mod above the working directory: run from inside the repository", toolsDir)
		}
		dir = parent
	}
}

// identity reads the version the tools module requires spec.VersionModule at, and a stamp that
// changes whenever the module's requirements, the build tags or the Go toolchain change.
func identity(modDir string, spec Spec) (version, stamp string, err error) {
	gomod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", "", fmt.Errorf("read tools module: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if f = trimRequire(f); len(f) >= 2 && f[0] == spec.VersionModule && strings.HasPrefix(f[1], "v") {
			version = f[1]
			break
		}
	}
	if version == "" {
		return "", "", fmt.Errorf("%s/go.mod does not require %s", modDir, spec.VersionModule)
	}
	h := sha256.New()
	h.Write(gomod)
	h.Write([]byte(runtime.Version()))
	// Without tags the stamp is the one caches built before tags existed carry.
	if len(spec.Tags) > 0 {
		h.Write([]byte("\x00tags=" + strings.Join(spec.Tags, ",")))
	}
	return version, hex.EncodeToString(h.Sum(nil)), nil
}

// cacheDir names spec's cache directory under bin/: <Name>-<version>, and +<tag> for each
// build tag. Builds with other tags are other binaries: each gets a directory of its own, so
// that checkouts sharing one bin/ while their tags differ (a branch adding a tag) do not
// rebuild over each other's cache, and none runs another's binary (the stamp checks that too).
func cacheDir(spec Spec, version string) string {
	name := spec.Name + "-" + version
	for _, t := range spec.Tags {
		name += "+" + t
	}
	return name
}

// trimRequire drops a leading "require" from a one-line requirement ("require m v1.2.3").
func trimRequire(f []string) []string {
	if len(f) > 0 && f[0] == "require" {
		return f[1:]
	}
	return f
}

func upToDate(dir, stamp string, spec Spec) bool {
	got, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || strings.TrimSpace(string(got)) != stamp {
		return false
	}
	for _, t := range spec.Targets {
		if fi, err := os.Stat(filepath.Join(dir, t.File)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// what names the binaries in log lines: "kube-apiserver and etcd".
func what(spec Spec) string {
	names := make([]string, len(spec.Targets))
	for i, t := range spec.Targets {
		names[i] = t.File
	}
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// lockFile takes an exclusive flock on path, waiting until ctx ends. The lock is released when
// the returned function is called or when the process dies, so a crashed build never wedges
// the next one.
func lockFile(ctx context.Context, path string, spec Spec, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !waiting {
			waiting = true
			logf("%s: another process is building %s; waiting for it (lock %s)", spec.Name, what(spec), path)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the build of %s by another process: %w", what(spec), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// build compiles the binaries into a fresh directory beside dir, then renames it into place,
// so a reader never sees a half-written cache.
func build(ctx context.Context, modDir, binRoot, dir, version, stamp string, spec Spec, logf func(string, ...any)) error {
	goBin, err := GoTool()
	if err != nil {
		return err
	}
	// Holding the lock, any earlier build directory belongs to a build that died.
	tmpPattern := "." + spec.Name + "-build-"
	if stale, _ := filepath.Glob(filepath.Join(binRoot, tmpPattern+"*")); len(stale) > 0 {
		for _, d := range stale {
			_ = os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(binRoot, tmpPattern)
	if err != nil {
		return fmt.Errorf("create build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it private
		return fmt.Errorf("build directory: %w", err)
	}

	args := []string{"build"}
	if len(spec.Tags) > 0 {
		args = append(args, "-tags", strings.Join(spec.Tags, ","))
	}
	if spec.LDFlags != nil {
		if ld := spec.LDFlags(version); len(ld) > 0 {
			args = append(args, "-ldflags", strings.Join(ld, " "))
		}
	}
	args = append(args, "-o", tmp+string(filepath.Separator))
	for _, t := range spec.Targets {
		args = append(args, t.Pkg)
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(),
		// The tools module's go.sum may lag behind a fresh checkout's module cache: let go
		// resolve what go.mod pins instead of failing on -mod=readonly.
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"),
		"GOWORK=off",
	)
	cmd.WaitDelay = 10 * time.Second
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out

	start := time.Now()
	logf("%s: building %s (%s) into %s; the first run takes several minutes", spec.Name, what(spec), version, dir)
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				logf("%s: still building %s (%s elapsed)", spec.Name, what(spec), time.Since(start).Round(time.Second))
			}
		}
	}()
	// A build must not outlive the test that started it: testenv.StartCommand ties it to the
	// test process.
	var d *testenv.Daemon
	if d, err = testenv.StartCommand("go build", cmd, ""); err == nil {
		<-d.Done()
		err = d.WaitErr()
	}
	close(done)
	<-progressDone // logf may belong to a test that ends soon after: never call it late
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("build of %s cut short after %s (compiled packages stay in the Go build cache; run %s to finish it): %w",
				what(spec), time.Since(start).Round(time.Second), spec.BuildHint, ctx.Err())
		}
		if downloadFailed(out.String()) {
			return fmt.Errorf("go build in %s: %w: %w\n%s", modDir, ErrNoModuleProxy, err, testenv.Tail(out.String(), 40))
		}
		return fmt.Errorf("go build in %s: %w\n%s", modDir, err, testenv.Tail(out.String(), 40))
	}
	// go build names a main package after its import path's last element, skipping a
	// major-version suffix ("v3"): rename whatever it produced to the name asked for.
	for _, t := range spec.Targets {
		if err := placeBinary(tmp, t.Pkg, t.File); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(stamp+"\n"), 0o644); err != nil {
		return fmt.Errorf("write build stamp: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove stale %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("move binaries into %s: %w", dir, err)
	}
	logf("%s: built %s (%s) in %s", spec.Name, what(spec), version, time.Since(start).Round(time.Second))
	return nil
}

func placeBinary(dir, pkg, file string) error {
	want := filepath.Join(dir, file)
	if _, err := os.Stat(want); err == nil {
		return nil
	}
	elems := strings.Split(pkg, "/")
	candidates := []string{elems[len(elems)-1]}
	if len(elems) >= 2 {
		candidates = append(candidates, elems[len(elems)-2])
	}
	for _, c := range candidates {
		p := filepath.Join(dir, c)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			if err := os.Rename(p, want); err != nil {
				return fmt.Errorf("rename %s: %w", p, err)
			}
			return nil
		}
	}
	return fmt.Errorf("go build produced no binary for %s in %s", pkg, dir)
}

// GoTool finds the go command: on PATH, or in the toolchain this test binary was built with.
func GoTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if goroot := os.Getenv("GOROOT"); goroot != "" {
		p := filepath.Join(goroot, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p := "/usr/local/go/bin/go"
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", ErrNoGo
}

// BuildContext bounds a possible build by tb's deadline (go test -timeout), leaving 30 seconds
// to report; without a deadline, by an hour.
func BuildContext(tb testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), deadline.Add(-30*time.Second))
		}
	}
	return context.WithTimeout(context.Background(), time.Hour)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
