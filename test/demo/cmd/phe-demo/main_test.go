package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/demo"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// launcherEnv makes this test binary run the launcher instead of the tests (see TestMain), so
// the tests run the launcher as make demo does: a process of its own, stopped with SIGINT.
const launcherEnv = "PHE_DEMO_LAUNCHER"

func TestMain(m *testing.M) {
	if os.Getenv(launcherEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// repoRoot is the directory of go.mod, seen from this package's directory.
var repoRoot = filepath.Join("..", "..", "..", "..")

// launcher is a running demo launcher.
type launcher struct {
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer // the child's output, read while it runs
	tmp  string
	done chan struct{}
	err  error
}

func startLauncher(t *testing.T, args ...string) *launcher {
	t.Helper()
	l := &launcher{out: &testutil.SyncBuffer{}, tmp: t.TempDir(), done: make(chan struct{})}
	l.cmd = exec.Command(os.Args[0], args...)
	l.cmd.Env = testenv.ChildEnv(l.tmp, launcherEnv+"=1")
	l.cmd.Stdout, l.cmd.Stderr = l.out, l.out
	// Killed with the test process if that dies first; the launcher's own children die with it.
	// A process group of its own, as a shell gives a foreground job: Ctrl-C is sent to the group.
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := testutil.StartProcess(t, l.cmd)
	go func() { l.err = p.Wait(); close(l.done) }()
	// Registered after StartProcess's cleanup, so it runs first: it ends the wait above before
	// that cleanup asks whether the process exited.
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			_ = l.cmd.Process.Kill()
			<-l.done
		}
	})
	return l
}

// wait waits for the launcher to exit and returns its exit code.
func (l *launcher) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(timeout):
		t.Fatalf("the launcher has not exited %s after it was told to; output:\n%s", timeout, l.out.String())
	}
	if l.err == nil {
		return 0
	}
	if ee, ok := l.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("launcher: %v", l.err)
	return -1
}

// waitOutput waits until the launcher's output matches re, or the launcher exits.
func (l *launcher) waitOutput(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindStringSubmatch(l.out.String()); m != nil {
			return m
		}
		select {
		case <-l.done:
			if m := re.FindStringSubmatch(l.out.String()); m != nil {
				return m
			}
			if strings.Contains(l.out.String(), "run the demo as root") || strings.Contains(l.out.String(), "skipped:") {
				testenv.Unavailable(t, "the demo cannot run here:\n%s", l.out.String())
			}
			t.Fatalf("the launcher exited (%v) before its output matched %q:\n%s", l.err, re, l.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the launcher's output has not matched %q within %s:\n%s", re, timeout, l.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return testutil.MustFreeLoopbackAddr(t)
}

// TestDefaults pins the fixed addresses the issue, README.md and docs/demo.md promise.
func TestDefaults(t *testing.T) {
	var o options
	fs := flags(&o, io.Discard)
	for name, want := range map[string]string{
		"exporter.listen-address":     "127.0.0.1:9847",
		"prometheus.listen-address":   "127.0.0.1:9090",
		"alertmanager.listen-address": "127.0.0.1:9093",
	} {
		if got := fs.Lookup(name).DefValue; got != want {
			t.Errorf("-%s defaults to %s, want %s", name, got, want)
		}
	}
}

// TestKubectlLine: the banner's kubectl command, and a note where kubectl is missing.
func TestKubectlLine(t *testing.T) {
	const want = "kubectl --kubeconfig /tmp/k/admin.kubeconfig get ph"
	found := func(string) (string, error) { return "/usr/bin/kubectl", nil }
	missing := func(name string) (string, error) { return "", &exec.Error{Name: name, Err: exec.ErrNotFound} }
	if got := kubectlLine("/tmp/k/admin.kubeconfig", found); got != want {
		t.Errorf("with kubectl: %q, want %q", got, want)
	}
	got := kubectlLine("/tmp/k/admin.kubeconfig", missing)
	if !strings.HasPrefix(got, want+"\n") || !strings.Contains(got, "kubectl is not installed: see docs/demo.md") {
		t.Errorf("without kubectl: %q, want the command and a note that kubectl is not installed", got)
	}
}

// TestPortInUse: a taken address fails at once, naming it, before anything starts.
func TestPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l := startLauncher(t, "-exporter", os.Args[0], "-repo", repoRoot,
		"-exporter.listen-address", freeAddr(t), "-prometheus.listen-address", addr, "-alertmanager.listen-address", freeAddr(t))
	if code := l.wait(t, time.Minute); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	out := l.out.String()
	for _, want := range []string{"Prometheus cannot listen on " + addr, "address already in use", "Stop what uses port " + port} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	if entries, _ := os.ReadDir(l.tmp); len(entries) != 0 {
		t.Errorf("a failed start left %d entries in its TMPDIR", len(entries))
	}
}

// TestDemo runs the demo as make demo does (the built exporter, the launcher in a process of its
// own) on free ports: every target is up when it says it is ready, every URL it prints answers,
// the kubectl command it prints lists every provider Ready, its break command takes a KVM host
// down and its repair command brings it back; and after SIGINT nothing it started is left: no
// process, no network namespace (nor veth pair), no temporary directory.
func TestDemo(t *testing.T) {
	testenv.SkipIfShort(t, "runs the demo: a kube-apiserver, KVM hosts as root, Prometheus and Alertmanager")
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "the demo's KVM hosts need root")
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH")
	}
	exporter := demo.BuildExporter(t, repoRoot)
	exporterAddr := freeAddr(t)
	args := []string{"-exporter", exporter, "-repo", repoRoot,
		"-exporter.listen-address", exporterAddr, "-prometheus.listen-address", freeAddr(t), "-alertmanager.listen-address", freeAddr(t)}
	l := startLauncher(t, args...)
	// The first run may build etcd and kube-apiserver (make test builds them beforehand).
	l.waitOutput(t, regexp.MustCompile(`(?m)^demo: ready\.`), 20*time.Minute)
	out := l.out.String()
	t.Logf("the launcher's output:\n%s", out)

	// Every process the launcher started, while they run: checked again after SIGINT.
	descendants := descendantsOf(t, l.cmd.Process.Pid)
	if len(descendants) < 8 {
		t.Errorf("the launcher runs %d processes, want at least etcd, kube-apiserver, the exporter, prometheus, alertmanager and the hosts' daemons", len(descendants))
	}

	// Every printed URL answers.
	urls := regexp.MustCompile(`http://[^\s]+`).FindAllString(out[strings.Index(out, "demo: ready."):], -1)
	if len(urls) < 4 {
		t.Errorf("the banner prints %d URLs, want the status page, /metrics, Prometheus's and Alertmanager's alerts pages: %q", len(urls), urls)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, u := range urls {
		resp, err := client.Get(u)
		if err != nil {
			t.Errorf("GET %s: %v", u, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s, want 200", u, resp.Status)
		}
	}

	// Every target up, as the exporter serves it.
	metrics := get(t, client, "http://"+exporterAddr+"/metrics")
	up := regexp.MustCompile(`(?m)^proxy_operator_provider_target_up\{[^}]*\} (\S+)$`).FindAllStringSubmatch(metrics, -1)
	if want := 5 + demo.VSphereTargets; len(up) != want {
		t.Errorf("%d target_up series, want %d (a cluster, a GCE project, 3 KVM hosts, a vCenter and its %d ESXi hosts)", len(up), want, demo.VSphereTargets-1)
	}
	for _, m := range up {
		if m[1] != "1" {
			t.Errorf("the demo said ready with a target down: %s", m[0])
		}
	}

	// The printed kubectl command lists every provider Ready.
	kc := regexp.MustCompile(`kubectl --kubeconfig (\S+) get ph`).FindStringSubmatch(out)
	if kc == nil {
		t.Fatalf("the banner prints no kubectl command:\n%s", out)
	}
	ph, err := exec.Command(kubectl, "--kubeconfig", kc[1], "get", "ph", "--no-headers").CombinedOutput()
	if err != nil {
		t.Fatalf("the printed kubectl command: %v\n%s", err, ph)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(ph)), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			rows[f[0]] = strings.Join(f[1:4], " ")
		}
	}
	for name, want := range map[string]string{demo.KubernetesProvider: "True AllTargetsReady 1/1", demo.GCPProvider: "True AllTargetsReady 1/1", demo.KVMProvider: "True AllTargetsReady 3/3", demo.VSphereProvider: fmt.Sprintf("True AllTargetsReady %d/%d", demo.VSphereTargets, demo.VSphereTargets)} {
		if rows[name] != want {
			t.Errorf("kubectl get ph %s: %q, want %q\n%s", name, rows[name], want, ph)
		}
	}

	// The printed break command takes the named host down; the repair command brings it back.
	brk := regexp.MustCompile(`(?m)^Break KVM host (\S+) .*\n  (.+)\nRepair it:\n  (.+)$`).FindStringSubmatch(out)
	if brk == nil {
		t.Fatalf("the banner prints no break and repair commands:\n%s", out)
	}
	host, breakCmd, repairCmd := brk[1], brk[2], brk[3]
	series := fmt.Sprintf(`proxy_operator_provider_target_reason{provider=%q,reason="%%s",target=%q} 1`, demo.KVMProvider, host)
	shell(t, breakCmd)
	waitMetrics(t, client, exporterAddr, fmt.Sprintf(series, "TCPUnreachable"), 2*time.Minute)
	// The mixin's alert, with the demo's window, reaches Alertmanager, which the launcher prints.
	alert := func(status string) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^demo: alert %s ProviderHealthTargetDown \{provider=%s, severity=\S+, target=%s\}: (.*)$`,
			status, demo.KVMProvider, regexp.QuoteMeta(host)))
	}
	fired := l.waitOutput(t, alert("firing"), 3*time.Minute)
	if !strings.Contains(fired[1], "TCPUnreachable") {
		t.Errorf("the alert's description does not give the reason TCPUnreachable: %s", fired[0])
	}
	shell(t, repairCmd)
	waitMetrics(t, client, exporterAddr, fmt.Sprintf(series, "Ready"), 2*time.Minute)
	l.waitOutput(t, alert("resolved"), 3*time.Minute)

	// Ctrl-C, as a terminal sends it: SIGINT to the whole foreground process group, the
	// launcher and every daemon it started at once. Everything stops, nothing is left.
	if err := syscall.Kill(-l.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := l.wait(t, 2*time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0; output:\n%s", code, l.out.String())
	}
	if !strings.Contains(l.out.String(), "demo: stopped: every process it started is reaped") {
		t.Errorf("the launcher does not say it stopped cleanly:\n%s", l.out.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var alive []string
		for _, p := range descendants {
			if p.running() {
				alive = append(alive, p.String())
			}
		}
		left, err := kvmhost.LeftoversOf(l.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(alive) == 0 && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the launcher exited, still alive: %v; KVM host leftovers: %v", alive, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	entries, err := os.ReadDir(l.tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the launcher's TMPDIR: %s", e.Name())
	}
}

func get(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func waitMetrics(t *testing.T, client *http.Client, addr, line string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(get(t, client, "http://"+addr+"/metrics"), line) {
		if time.Now().After(deadline) {
			t.Fatalf("the exporter's /metrics has no %s within %s", line, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func shell(t *testing.T, command string) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", command).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
}

// proc is a process seen in /proc: its pid and its start time, so a reused pid is not taken for it.
type proc struct {
	pid   int
	start string
	comm  string
}

func (p proc) String() string { return fmt.Sprintf("%s (pid %d)", p.comm, p.pid) }

func (p proc) running() bool {
	st, err := readStat(p.pid)
	return err == nil && st.start == p.start && st.state != "Z"
}

type stat struct {
	ppid         int
	state, start string
	comm         string
}

// readStat parses /proc/PID/stat: "pid (comm) state ppid ... starttime(22nd field) ...".
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, err
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return stat{}, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[closing+1:])
	if len(f) < 20 {
		return stat{}, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	ppid, _ := strconv.Atoi(f[1])
	return stat{ppid: ppid, state: f[0], start: f[19], comm: s[open+1 : closing]}, nil
}

// descendantsOf lists the running descendants of pid.
func descendantsOf(t *testing.T, pid int) []proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	stats := map[int]stat{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(p)
		if err != nil {
			continue
		}
		parent[p], stats[p] = st.ppid, st
	}
	var out []proc
	for p := range parent {
		for a := parent[p]; a > 1; a = parent[a] {
			if a == pid {
				out = append(out, proc{pid: p, start: stats[p].start, comm: stats[p].comm})
				break
			}
		}
	}
	return out
}
