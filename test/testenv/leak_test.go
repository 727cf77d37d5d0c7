package testenv_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

// childEnv selects the child's mode when this test binary re-runs itself.
const childEnv = "PHE_TESTENV_LEAK_CHILD"

// TestNothingLeftAfterFailure starts every part of the test environment in a child test
// process that then fails on purpose, and asserts from this process that no daemon the child
// started and no network interface of its hosts is left. Two ways to fail: a test failure
// (cleanups run) and a panic on another goroutine (the process dies at once and no cleanup runs:
// only the kernel's parent-death signal takes the daemons down).
func TestNothingLeftAfterFailure(t *testing.T) {
	if mode := os.Getenv(childEnv); mode != "" {
		startEverythingThenFail(t, mode)
		return
	}
	testenv.SkipIfShort(t, "starts every part of the test environment in a child test process")
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "the KVM hosts of the test environment need root")
	}
	for _, mode := range []string{"fatal", "crash"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNothingLeftAfterFailure$", "-test.v", "-test.timeout=20m")
			// The crashing child cannot remove its temporary directories: they go under this
			// test's, which its cleanup removes.
			cmd.Env = testenv.ChildEnv(t.TempDir(), childEnv+"="+mode)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if strings.Contains(out.String(), "skipped:") || strings.Contains(out.String(), "REQUIRE_INTEGRATION=1 and a part") {
				testenv.Unavailable(t, "the child could not start the environment:\n%s", testenv.Tail(out.String(), 40))
			}
			if err == nil {
				t.Fatalf("the child was meant to fail and did not:\n%s", testenv.Tail(out.String(), 40))
			}
			started := parseStarted(t, out.String())
			if len(started) < 6 {
				t.Fatalf("the child reported %d daemons, want at least etcd, kube-apiserver, prometheus, alertmanager and the hosts' sshd and libvirtd:\n%s",
					len(started), testenv.Tail(out.String(), 40))
			}
			names := make([]string, len(started))
			for i, p := range started {
				names[i] = p.comm
			}
			t.Logf("the child started %d processes: %s", len(started), strings.Join(names, " "))
			// The kernel delivers the parent-death signal at once, but a killed process lingers
			// as a zombie until it is reaped, and a network namespace is torn down (with the
			// veth ends of its hosts) asynchronously after its last process: give both time.
			deadline := time.Now().Add(30 * time.Second)
			for {
				var alive []string
				for _, p := range started {
					if p.running() {
						alive = append(alive, p.String())
					}
				}
				left, err := kvmhost.LeftoversOf(cmd.Process.Pid)
				if err != nil {
					t.Fatal(err)
				}
				if len(alive) == 0 && len(left) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("30s after the failed test: %d processes outlived it (%s); the KVM hosts left: %s",
						len(alive), strings.Join(alive, ", "), strings.Join(left, ", "))
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// startEverythingThenFail runs in the child: it starts each part, prints every process it
// started (its descendants), then fails the way mode says.
func startEverythingThenFail(t *testing.T, mode string) {
	env := kube.Start(t)
	// The veth pairs stay for the kernel to remove with the namespaces, so that a namespace
	// that outlives the failed test shows as its veth pair even when the cleanups run.
	fleet := kvmhost.Start(t, 2, kvmhost.LeaveVethToKernel())
	gce := gcefake.Start(t)
	stack := promstack.Start(t, promstack.Options{ScrapeTargets: []string{strings.TrimPrefix(env.URL, "https://")}})

	// Each part answers, so the processes listed below are the running environment.
	if _, err := http.Get(gce.URL()); err != nil {
		t.Fatalf("gce wire server: %v", err)
	}
	if _, err := http.Get(stack.PrometheusURL + "/-/ready"); err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	if len(fleet.Hosts) != 2 {
		t.Fatalf("%d hosts", len(fleet.Hosts))
	}
	for _, p := range descendants(os.Getpid()) {
		fmt.Printf("STARTED %d %d %s\n", p.pid, p.start, p.comm)
	}
	switch mode {
	case "crash":
		go panic("failing on purpose: a panic on another goroutine, no cleanup runs")
		time.Sleep(time.Minute)
	default:
		t.Fatal("failing on purpose: the cleanups run")
	}
}

// proc identifies a process across PID reuse: its PID and its start time (in clock ticks since
// boot).
type proc struct {
	pid   int
	start uint64
	comm  string
}

func (p proc) String() string { return fmt.Sprintf("%s (pid %d)", p.comm, p.pid) }

// running reports whether the process still exists and is not a zombie.
func (p proc) running() bool {
	q, state, ok := readStat(p.pid)
	return ok && q.start == p.start && state != "Z" && state != "X"
}

func readStat(pid int) (p proc, state string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return proc{}, "", false
	}
	s := string(b)
	// comm is in parentheses and may hold spaces; the fields after it are space separated.
	lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if lp < 0 || rp < lp {
		return proc{}, "", false
	}
	f := strings.Fields(s[rp+1:])
	if len(f) < 20 {
		return proc{}, "", false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return proc{}, "", false
	}
	return proc{pid: pid, start: start, comm: s[lp+1 : rp]}, f[0], true
}

func parentOf(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// descendants lists every live process below pid.
func descendants(pid int) []proc {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		children[parentOf(n)] = append(children[parentOf(n)], n)
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if q, state, ok := readStat(c); ok && state != "Z" {
				out = append(out, q)
			}
			queue = append(queue, c)
		}
	}
	return out
}

func parseStarted(t *testing.T, out string) []proc {
	t.Helper()
	var ps []proc
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var p proc
		if n, _ := fmt.Sscanf(sc.Text(), "STARTED %d %d %s", &p.pid, &p.start, &p.comm); n == 3 {
			ps = append(ps, p)
		}
	}
	return ps
}
