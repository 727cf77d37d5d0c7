package kube

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
	"time"
)

// The tools module that pins what is built, relative to the repository root.
const toolsDir = "tools/kube"

// The packages the tools module builds, and the file name each gets under bin/.
var buildTargets = []struct{ pkg, file string }{
	{"k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"},
	{"go.etcd.io/etcd/server/v3", "etcd"},
}

// stampFile records what a cache directory was built from; a directory whose stamp does not
// match the tools module's go.mod and the Go version is rebuilt. go.sum is left out: go.mod
// alone decides what is built, and a build with -mod=mod may add lines to go.sum.
const stampFile = "stamp"

// progressEvery is how often a running build says it is still going.
const progressEvery = 30 * time.Second

// The build failures that mean this machine cannot build the binaries, as opposed to a bug in
// the tools module or in this package: EnsureBinaries's error wraps one of them when so.
var (
	// ErrNoGo: the go command is not installed.
	ErrNoGo = errors.New("the go command is not on PATH: install Go to build kube-apiserver and etcd")
	// ErrNoModuleProxy: go could not download the modules to build from.
	ErrNoModuleProxy = errors.New("the Go module proxy is not reachable")
)

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

// EnsureBinaries returns the paths of the kube-apiserver and etcd binaries built from the tools
// module, building them first when the cache under bin/kube-<version>/ (at the repository root)
// is missing or stale. Only the first run pays for the build (several minutes on two cores);
// logf receives a line when the build starts, every 30 seconds while it runs and when it ends.
// Concurrent callers, in this process or others, wait on a lock file under bin/ instead of
// building twice. A build that ctx cuts short keeps its compiled packages in Go's build cache,
// so the next attempt resumes where it stopped. An error that wraps ErrNoGo or ErrNoModuleProxy
// means this machine cannot build them; any other is a bug to report.
func EnsureBinaries(ctx context.Context, logf func(format string, args ...any)) (apiserver, etcd string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	return ensureBinaries(ctx, root, logf)
}

func ensureBinaries(ctx context.Context, root string, logf func(string, ...any)) (apiserver, etcd string, err error) {
	modDir := filepath.Join(root, toolsDir)
	kubeVersion, stamp, err := toolsIdentity(modDir)
	if err != nil {
		return "", "", err
	}
	binRoot := filepath.Join(root, "bin")
	dir := filepath.Join(binRoot, "kube-"+kubeVersion)
	apiserver = filepath.Join(dir, "kube-apiserver")
	etcd = filepath.Join(dir, "etcd")
	if err := os.MkdirAll(binRoot, 0o755); err != nil {
		return "", "", fmt.Errorf("create %s: %w", binRoot, err)
	}
	// bin/ holds only built artefacts: keep it out of version control on its own.
	if ignore := filepath.Join(binRoot, ".gitignore"); !exists(ignore) {
		_ = os.WriteFile(ignore, []byte("*\n"), 0o644)
	}
	if upToDate(dir, stamp) {
		return apiserver, etcd, nil
	}

	unlock, err := lockFile(ctx, filepath.Join(binRoot, ".kube-build.lock"), logf)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	// Another process may have finished the build while this one waited for the lock.
	if upToDate(dir, stamp) {
		return apiserver, etcd, nil
	}
	if err := build(ctx, modDir, binRoot, dir, kubeVersion, stamp, logf); err != nil {
		return "", "", err
	}
	return apiserver, etcd, nil
}

// repoRoot finds the repository root: the nearest ancestor of the working directory that holds
// the tools module. Tests run in their package's directory, so this works from any package.
func repoRoot() (string, error) {
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

// toolsIdentity reads the Kubernetes version the tools module pins and a stamp that changes
// whenever the module's requirements or the Go toolchain change.
func toolsIdentity(modDir string) (kubeVersion, stamp string, err error) {
	gomod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", "", fmt.Errorf("read tools module: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			kubeVersion = f[1]
			break
		}
	}
	if kubeVersion == "" {
		return "", "", fmt.Errorf("%s/go.mod does not require k8s.io/kubernetes", modDir)
	}
	h := sha256.New()
	h.Write(gomod)
	h.Write([]byte(runtime.Version()))
	return kubeVersion, hex.EncodeToString(h.Sum(nil)), nil
}

func upToDate(dir, stamp string) bool {
	got, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || strings.TrimSpace(string(got)) != stamp {
		return false
	}
	for _, t := range buildTargets {
		if fi, err := os.Stat(filepath.Join(dir, t.file)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// lockFile takes an exclusive flock on path, waiting until ctx ends. The lock is released when
// the returned function is called or when the process dies, so a crashed build never wedges
// the next one.
func lockFile(ctx context.Context, path string, logf func(string, ...any)) (func(), error) {
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
			logf("kube: another process is building the Kubernetes binaries; waiting for it (lock %s)", path)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the Kubernetes binaries build by another process: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// build compiles both binaries into a fresh directory beside dir, then renames it into place,
// so a reader never sees a half-written cache.
func build(ctx context.Context, modDir, binRoot, dir, kubeVersion, stamp string, logf func(string, ...any)) error {
	goBin, err := goTool()
	if err != nil {
		return err
	}
	// Holding the lock, any earlier build directory belongs to a build that died.
	if stale, _ := filepath.Glob(filepath.Join(binRoot, ".kube-build-*")); len(stale) > 0 {
		for _, d := range stale {
			_ = os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(binRoot, ".kube-build-")
	if err != nil {
		return fmt.Errorf("create build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it private
		return fmt.Errorf("build directory: %w", err)
	}

	// kube-apiserver reports this version (kubectl version, /version) instead of v0.0.0-master.
	minor := ""
	if parts := strings.SplitN(strings.TrimPrefix(kubeVersion, "v"), ".", 3); len(parts) >= 2 {
		minor = parts[1]
	}
	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X", "k8s.io/component-base/version.gitVersion=" + kubeVersion,
		"-X", "k8s.io/component-base/version.gitMajor=1",
		"-X", "k8s.io/component-base/version.gitMinor=" + minor,
		"-X", "k8s.io/component-base/version.gitTreeState=clean",
	}, " ")
	args := []string{"build", "-ldflags", ldflags, "-o", tmp + string(filepath.Separator)}
	for _, t := range buildTargets {
		args = append(args, t.pkg)
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
	// A build must not outlive the test that started it (see startProcess for the thread).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out

	start := time.Now()
	logf("kube: building kube-apiserver and etcd (%s) into %s; the first run takes several minutes", kubeVersion, dir)
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
				logf("kube: still building kube-apiserver and etcd (%s elapsed)", time.Since(start).Round(time.Second))
			}
		}
	}()
	runErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		runErr <- cmd.Run()
	}()
	err = <-runErr
	close(done)
	<-progressDone // logf may belong to a test that ends soon after: never call it late
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("build of kube-apiserver and etcd cut short after %s (compiled packages stay in the Go build cache; run scripts/build-kube.sh to finish it): %w",
				time.Since(start).Round(time.Second), ctx.Err())
		}
		if downloadFailed(out.String()) {
			return fmt.Errorf("go build in %s: %w: %w\n%s", modDir, ErrNoModuleProxy, err, tail(out.String(), 40))
		}
		return fmt.Errorf("go build in %s: %w\n%s", modDir, err, tail(out.String(), 40))
	}
	// go build names the etcd main package after its module path ("v3" or "server"): rename
	// whatever it produced for each package to the name this package expects.
	for _, t := range buildTargets {
		if err := placeBinary(tmp, t.pkg, t.file); err != nil {
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
	logf("kube: built kube-apiserver and etcd (%s) in %s", kubeVersion, time.Since(start).Round(time.Second))
	return nil
}

func placeBinary(dir, pkg, file string) error {
	want := filepath.Join(dir, file)
	if _, err := os.Stat(want); err == nil {
		return nil
	}
	// The default name is the last path element, skipping a major-version suffix.
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

// goTool finds the go command: on PATH, or in the toolchain this test binary was built with.
func goTool() (string, error) {
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

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
