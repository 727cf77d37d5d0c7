package toolbuild

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testSpec is shaped like the real ones: the version of one module names the cache directory.
var testSpec = Spec{
	Name:          "kube",
	ToolsDir:      "tools/kube",
	VersionModule: "k8s.io/kubernetes",
	Targets:       []Target{{Pkg: "k8s.io/kubernetes/cmd/kube-apiserver", File: "kube-apiserver"}, {Pkg: "go.etcd.io/etcd/server/v3", File: "etcd"}},
	BuildHint:     "scripts/build-kube.sh",
}

const toolsDir = "tools/kube"

func fakeRepo(t *testing.T, gomod string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, toolsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, toolsDir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const fakeGoMod = "module example.com/tools\n\ngo 1.26\n\nrequire (\n\tk8s.io/kubernetes v1.99.0\n)\n"

// A cache whose stamp matches the tools module is used as is: no build, no lock wait.
func TestEnsureBinariesUsesCache(t *testing.T) {
	root := fakeRepo(t, fakeGoMod)
	version, stamp, err := identity(filepath.Join(root, toolsDir), testSpec)
	if err != nil {
		t.Fatal(err)
	}
	if version != "v1.99.0" {
		t.Fatalf("version = %q, want v1.99.0", version)
	}
	dir := filepath.Join(root, "bin", "kube-v1.99.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte(stamp+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged []string
	logf := func(format string, args ...any) { logged = append(logged, format) }
	paths, err := ensure(context.Background(), root, testSpec, logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 || paths[0] != filepath.Join(dir, "kube-apiserver") || paths[1] != filepath.Join(dir, "etcd") {
		t.Errorf("paths = %v; want kube-apiserver and etcd in %s", paths, dir)
	}
	if len(logged) != 0 {
		t.Errorf("a cached build logged %q", logged)
	}

	// Another go.mod means another stamp: the cache is stale.
	if err := os.WriteFile(filepath.Join(root, toolsDir, "go.mod"), []byte(fakeGoMod+"\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stamp2, err := identity(filepath.Join(root, toolsDir), testSpec)
	if err != nil {
		t.Fatal(err)
	}
	if stamp2 == stamp || upToDate(dir, stamp2, testSpec) {
		t.Errorf("a changed go.mod still matches the cache")
	}
}

func TestIdentityNeedsVersionModule(t *testing.T) {
	root := fakeRepo(t, "module example.com/tools\n")
	if _, _, err := identity(filepath.Join(root, toolsDir), testSpec); err == nil || !strings.Contains(err.Error(), "k8s.io/kubernetes") {
		t.Errorf("err = %v, want one naming k8s.io/kubernetes", err)
	}
}

// Build tags are part of the stamp (a binary built without them is another binary); a spec
// without tags keeps the stamp caches built before tags existed carry.
func TestIdentityStampsTags(t *testing.T) {
	root := fakeRepo(t, "module example.com/tools\n\ngo 1.26\n\nrequire github.com/prometheus/prometheus v0.316.0 // indirect\n")
	spec := Spec{Name: "prometheus", VersionModule: "github.com/prometheus/prometheus"}
	version, plain, err := identity(filepath.Join(root, toolsDir), spec)
	if err != nil {
		t.Fatal(err)
	}
	if version != "v0.316.0" {
		t.Errorf("version = %q, want v0.316.0 (from an indirect requirement)", version)
	}
	spec.Tags = []string{"remove_all_sd"}
	_, tagged, err := identity(filepath.Join(root, toolsDir), spec)
	if err != nil {
		t.Fatal(err)
	}
	if tagged == plain {
		t.Error("adding a build tag left the stamp unchanged")
	}
}

// A build with other tags has a cache directory of its own: checkouts sharing bin/ whose tags
// differ never rebuild over each other's binaries, nor run them.
func TestCacheDirNamesTags(t *testing.T) {
	spec := Spec{Name: "prometheus"}
	if got := cacheDir(spec, "v0.316.0"); got != "prometheus-v0.316.0" {
		t.Errorf("without tags: %q, want prometheus-v0.316.0", got)
	}
	spec.Tags = []string{"remove_all_sd"}
	one := cacheDir(spec, "v0.316.0")
	spec.Tags = []string{"remove_all_sd", "enable_kubernetes_sd"}
	two := cacheDir(spec, "v0.316.0")
	if one == two || two != "prometheus-v0.316.0+remove_all_sd+enable_kubernetes_sd" {
		t.Errorf("with one tag %q, with two %q: want distinct directories naming the tags", one, two)
	}
}

// Two builders never run at once: the second waits on the lock and gives up with its context.
func TestBuildLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockFile(context.Background(), path, testSpec, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var waited []string
	_, err = lockFile(ctx, path, testSpec, func(format string, args ...any) { waited = append(waited, format) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: err = %v, want deadline exceeded", err)
	}
	if len(waited) != 1 {
		t.Errorf("the waiting builder logged %d lines, want 1 saying it waits", len(waited))
	}
	unlock()
	unlock2, err := lockFile(context.Background(), path, testSpec, t.Logf)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}

// A build that cannot download its modules counts as "this machine cannot build", a compile
// error does not: both outputs come from the real go command, on a module made here, the
// module proxy pointed at a closed loopback port.
func TestDownloadFailedClassifiesGoOutput(t *testing.T) {
	goBin, err := GoTool()
	if err != nil {
		t.Fatalf("the go command running this test is not found: %v", err)
	}
	build := func(gomod, main string) string {
		t.Helper()
		dir := t.TempDir()
		for name, content := range map[string]string{"go.mod": gomod, "main.go": main} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", filepath.Join(dir, "out"), ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=http://127.0.0.1:1", "GOSUMDB=off", "GOFLAGS=-mod=mod",
			"GOWORK=off", "GOTOOLCHAIN=local", "GOMODCACHE="+filepath.Join(dir, "modcache"))
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("go build succeeded, want it to fail:\n%s", out)
		}
		// go makes its module cache read-only; let t.TempDir's cleanup remove it.
		t.Cleanup(func() {
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					_ = os.Chmod(p, 0o755)
				}
				return nil
			})
		})
		return string(out)
	}
	download := build("module example.com/m\n\ngo 1.26\n\nrequire example.com/not/downloaded v1.0.0\n",
		"package main\n\nimport _ \"example.com/not/downloaded\"\n\nfunc main() {}\n")
	if !downloadFailed(download) {
		t.Errorf("a build that could not reach the module proxy is not classified as such:\n%s", download)
	}
	compile := build("module example.com/m\n\ngo 1.26\n", "package main\n\nfunc main() { undefinedName() }\n")
	if downloadFailed(compile) {
		t.Errorf("a compile error is classified as an unreachable module proxy:\n%s", compile)
	}
}

// In a test binary a missing build is not started on the spot, so that a plain go test gives
// its first results at once: Ensure says, in one line, to run make test-env, and builds only
// under REQUIRE_INTEGRATION=1 or BUILD_TEST_ENV=1.
func TestEnsureDoesNotBuildInATest(t *testing.T) {
	t.Setenv("REQUIRE_INTEGRATION", "")
	t.Setenv(BuildEnv, "")
	if MayBuild() {
		t.Fatal("MayBuild in a test binary without REQUIRE_INTEGRATION or BUILD_TEST_ENV")
	}
	root := fakeRepo(t, fakeGoMod)
	_, err := ensure(context.Background(), root, testSpec, t.Logf)
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("ensure without a cache: %v, want ErrNotBuilt", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "kube-apiserver and etcd") || !strings.Contains(msg, "make test-env") || strings.Contains(msg, "\n") {
		t.Errorf("the error %q does not say in one line what is missing and to run make test-env", msg)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", ".kube-build.lock")); err == nil {
		t.Error("ensure took the build lock although it may not build")
	}
	for _, env := range []string{"REQUIRE_INTEGRATION", BuildEnv} {
		t.Setenv(env, "1")
		if !MayBuild() {
			t.Errorf("%s=1: MayBuild is false, want true", env)
		}
		t.Setenv(env, "")
	}
}
