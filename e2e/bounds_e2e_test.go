package e2e

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// specialHostFiles writes a providers file whose kvm provider globs inventory/*.yml, and puts a
// FIFO, a socket, a symlink to /dev/zero and one good file into inventory/.
func specialHostFiles(t *testing.T) (providers string) {
	t.Helper()
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory")
	if err := os.Mkdir(inv, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(inv, "fifo.yml"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(inv, "sock.yml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Symlink("/dev/zero", filepath.Join(inv, "zero.yml")); err != nil {
		t.Fatal(err)
	}
	testutil.ReplaceFile(t, filepath.Join(inv, "good.yml"), "- targets: [\"127.0.0.1:1\"]\n")
	providers = filepath.Join(dir, "providers.yml")
	testutil.ReplaceFile(t, providers, `providers:
- name: lab
  type: kvm
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hostFiles: [inventory/*.yml]
`)
	return providers
}

// TestSpecialHostFilesThenSIGTERM: a FIFO, a socket and /dev/zero in a host glob do not stop
// the exporter from listening: each is refused by name and kind, the good file's host is
// checked, and SIGTERM ends the process within 10s with exit code 0.
func TestSpecialHostFilesThenSIGTERM(t *testing.T) {
	providers := specialHostFiles(t)
	x := startProcess(t, "--config.file="+providers, "--provider-check-interval=10s")
	code, body := x.get("/api/v1/status")
	for _, want := range []string{"fifo.yml is a named pipe (FIFO)", "sock.yml is a socket", "zero.yml is a character device"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/api/v1/status: %d, says %q: %v", code, want, strings.Contains(body, want))
		}
	}
	_, metrics := x.get("/metrics")
	if !strings.Contains(metrics, `proxy_operator_host_file_targets{file="`+filepath.Join(filepath.Dir(providers), "inventory", "good.yml")+`",provider="lab"} 1`) {
		t.Errorf("the good file's host is not counted; /metrics:\n%s", metrics)
	}
	x.signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { x.proc.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the exporter did not exit within 10s of SIGTERM; logs:\n%s", x.logs.String())
	}
	if code := x.proc.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0; logs:\n%s", code, x.logs.String())
	}
}

// TestSpecialProvidersFile: a FIFO, a socket or /dev/zero as the providers file is refused at
// once, naming the file and its kind, by a start and by --config.check.
func TestSpecialProvidersFile(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.yml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	zero := filepath.Join(dir, "zero.yml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{fifo: "a named pipe (FIFO)", sock: "a socket", zero: "a character device"} {
		for _, extra := range [][]string{nil, {"--config.check"}} {
			var out bytes.Buffer
			cmd := exec.Command(bin, append([]string{"--config.file=" + path, "--web.listen-address=127.0.0.1:0"}, extra...)...)
			cmd.Stdout, cmd.Stderr = &out, &out
			p := testutil.StartProcess(t, cmd)
			if err := p.Wait(); err == nil || cmd.ProcessState.ExitCode() != 1 {
				t.Errorf("%s as the providers file %v: %v, want exit code 1", kind, extra, err)
			}
			if want := path + " is " + kind + ", not a regular file"; !strings.Contains(out.String(), want) {
				t.Errorf("%v: output %q; want it to say %q", extra, out.String(), want)
			}
		}
	}
}

// TestConfigCheckAliasBomb: --config.check of a providers file whose host file is the alias
// bomb (a 32 KB file of about a million problems) prints 20 problems and the count of the rest.
func TestConfigCheckAliasBomb(t *testing.T) {
	bin := binary(t)
	providers := specialHostFiles(t)
	var b strings.Builder
	b.WriteString("- targets: &bad [" + strings.TrimSuffix(strings.Repeat(`"bad address",`, 1000), ",") + "]\n")
	b.WriteString(strings.Repeat("- targets: *bad\n", 1000))
	testutil.ReplaceFile(t, filepath.Join(filepath.Dir(providers), "inventory", "good.yml"), b.String())
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+providers, "--config.check")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	p := testutil.StartProcess(t, cmd)
	_ = p.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	out := stderr.String()
	if !strings.Contains(out, "more problems (the first 20 are shown)") || len(out) > 32<<10 {
		t.Errorf("--config.check printed %d bytes; want at most 32 KiB ending with the count of the rest:\n%.3000s", len(out), out)
	}
}
