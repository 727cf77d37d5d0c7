// Package e2e holds the end-to-end tests: each starts the real systems it needs (a Kubernetes
// API server, KVM hosts, Prometheus and Alertmanager, the GCE wire server, the vSphere
// simulator) through test/testenv, and runs the exporter as a user does: the binary built
// from the module root by TestMain, started as a process of its own, read through its HTTP
// endpoints and its JSON logs, stopped with SIGTERM. The /probe tests build the exporter in
// process through package exporter's API instead, to compare a probe with the runner's
// snapshot. Under -short every test skips, and TestMain builds nothing.
package e2e

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
	// The provider types of the build, for the tests that build the exporter in process.
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

// repoRoot is the module root, relative to this package's directory (where go test runs it).
const repoRoot = ".."

var (
	// exporterBin is the exporter binary TestMain built.
	exporterBin string
	// buildErr is why TestMain could not build it.
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "phe-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exporterBin, buildErr = buildExporter(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildExporter builds the exporter from the module root into dir, as a user builds it, with
// the race detector when this test binary has it.
func buildExporter(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building the exporter binary needs Go on PATH: %w", err)
	}
	bin := filepath.Join(dir, "provider_health_exporter")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, ".")...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build of the exporter: %w\n%s", err, out)
	}
	return bin, nil
}

// binary returns the exporter binary TestMain built; under -short the test skips.
func binary(t testing.TB) string {
	t.Helper()
	testenv.SkipIfShort(t, "runs the exporter binary")
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return exporterBin
}

// testExporter is the exporter binary running as a process of its own, on a loopback port.
type testExporter struct {
	t      *testing.T
	base   string // http://127.0.0.1:PORT
	proc   *testutil.Process
	logs   *testutil.SyncBuffer // stderr: the JSON log records
	stdout *testutil.SyncBuffer
	client *http.Client
}

// startExporter runs the exporter binary with args plus a loopback listen address and JSON
// logs at debug level, and returns it once it serves HTTP. At the end of the test it stops it
// (SIGTERM) and expects exit code 0 within 20s.
func startExporter(t *testing.T, args ...string) *testExporter {
	t.Helper()
	x := startProcess(t, args...)
	t.Cleanup(func() {
		if !x.proc.Exited() {
			x.signal(syscall.SIGTERM)
			exited := make(chan struct{})
			go func() { x.proc.Wait(); close(exited) }()
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				t.Errorf("the exporter did not stop within 20s of SIGTERM; logs:\n%s", x.logs.String())
				return
			}
		}
		if code := x.proc.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d, want 0; logs:\n%s", code, x.logs.String())
		}
	})
	return x
}

// startProcess runs the exporter binary as startExporter does, without its check of the exit:
// for a test that stops or kills the process itself.
func startProcess(t *testing.T, args ...string) *testExporter {
	t.Helper()
	x := &testExporter{t: t, logs: &testutil.SyncBuffer{}, stdout: &testutil.SyncBuffer{}, client: &http.Client{Timeout: 10 * time.Second}}
	cmd := exec.Command(binary(t), append([]string{"--web.listen-address=127.0.0.1:0", "--log.format=json", "--log.level=debug"}, args...)...)
	cmd.Stdout, cmd.Stderr = x.stdout, x.logs
	x.proc = testutil.StartProcess(t, cmd)
	x.base = "http://" + testutil.ListenAddress(t, x.logs, x.proc.Exited)
	return x
}

// signal sends sig to the exporter's process.
func (x *testExporter) signal(sig os.Signal) {
	x.t.Helper()
	if err := x.proc.Cmd.Process.Signal(sig); err != nil {
		x.t.Fatalf("signal %v: %v", sig, err)
	}
}

// get fetches a path and returns the status and body.
func (x *testExporter) get(path string) (int, string) {
	x.t.Helper()
	return x.do(http.MethodGet, path)
}

func (x *testExporter) do(method, path string) (int, string) {
	x.t.Helper()
	return testutil.Request(x.t, x.client, method, x.base+path)
}

// repoFile is the path of a file of the repository, given from its root.
func repoFile(elem ...string) string {
	return filepath.Join(append([]string{repoRoot}, elem...)...)
}
