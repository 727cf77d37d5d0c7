package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// aliasBomb is the host file of about 32 KB: one anchored list of 1,000 bad targets
// reused 1,000 times, about a million problems if every one were kept.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("- targets: &bad [" + strings.TrimSuffix(strings.Repeat(`"bad address",`, 1000), ",") + "]\n")
	b.WriteString(strings.Repeat("- targets: *bad\n", 1000))
	return b.String()
}

// badProviders is the providers file of about 7 MB, every entry of it wrong.
func badProviders() string {
	entry := "- {name: Bad_Name, type: nope, kvm: {hosts: [{address: \"not an address\"}]}}\n"
	return "providers:\n" + strings.Repeat(entry, 7_000_000/len(entry))
}

// peakRSS is the most resident memory the process pid ever held (VmHWM of /proc/PID/status), in
// bytes.
func peakRSS(b *testing.B, pid int) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("VmHWM %q: %v", v, err)
			}
			return kib * 1024
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// longestLine is the length of the longest line of s.
func longestLine(s string) int {
	most := 0
	for line := range strings.SplitSeq(s, "\n") {
		most = max(most, len(line))
	}
	return most
}

// BenchmarkAliasBomb runs the exporter binary as a user does against the inputs and
// reports what they cost: the output of --config.check of a providers file whose host file is
// the alias bomb, and that process's peak RSS (getrusage of the child); then a serving
// exporter with the bomb as a host file: the status page, /api/v1/status, the longest log line,
// the answer of a reload of the 7 MB bad providers file (refused by --config.max-size, and
// parsed under a limit of 8 MiB by a second exporter) and each serving process's peak RSS
// (VmHWM, read before SIGTERM). `make bench` runs it; the figures are in docs/benchmarks.md.
func BenchmarkAliasBomb(b *testing.B) {
	bin := binary(b)
	dir := b.TempDir()
	inv := filepath.Join(dir, "inventory")
	if err := os.Mkdir(inv, 0o755); err != nil {
		b.Fatal(err)
	}
	testutil.ReplaceFile(b, filepath.Join(inv, "bomb.yml"), aliasBomb())
	providers := filepath.Join(dir, "providers.yml")
	good := `providers:
- name: lab
  type: kvm
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hostFiles: [inventory/*.yml]
`

	for b.Loop() {
		// --config.check.
		testutil.ReplaceFile(b, providers, good)
		var out bytes.Buffer
		cmd := exec.Command(bin, "--config.file="+providers, "--config.check")
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = testutil.StartProcess(b, cmd).Wait()
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out.String(), "more problems") {
			b.Fatalf("--config.check of the alias bomb: exit code %d; want 1 and the count of the rest:\n%.2000s", code, out.String())
		}
		b.ReportMetric(float64(out.Len()), "config.check-B")
		b.ReportMetric(float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)*1024/(1<<20), "config.check-peak-RSS-MiB")

		// Serving, under the default --config.max-size: the bad file's reload is refused by size.
		x := startBenchExporter(b, providers)
		_, page := x.get("/")
		_, api := x.get("/api/v1/status")
		if !strings.Contains(page, "more problems") || !strings.Contains(api, "more problems") {
			b.Fatalf("the page or the API does not count the rest of the bomb's problems:\n%.2000s\n%.2000s", page, api)
		}
		b.ReportMetric(float64(len(page)), "status-page-B")
		b.ReportMetric(float64(len(api)), "api-status-B")
		testutil.ReplaceFile(b, providers, badProviders())
		code, reload := x.do(http.MethodPost, "/-/reload")
		if code != http.StatusInternalServerError || !strings.Contains(reload, "--config.max-size") {
			b.Fatalf("reload of a 7 MB file: %d %.2000s; want 500 naming --config.max-size", code, reload)
		}
		b.ReportMetric(float64(len(reload)), "reload-refused-B")
		b.ReportMetric(peakRSS(b, x.pid())/(1<<20), "serving-peak-RSS-MiB")
		x.stop()

		// Serving with --config.max-size=8MiB: the 7 MB file is parsed, its problems bounded.
		testutil.ReplaceFile(b, providers, good)
		y := startBenchExporter(b, providers, "--config.max-size=8MiB")
		testutil.ReplaceFile(b, providers, badProviders())
		code, reload = y.do(http.MethodPost, "/-/reload")
		if code != http.StatusInternalServerError || !strings.Contains(reload, "more problems") {
			b.Fatalf("reload of a 7 MB bad file under an 8 MiB limit: %d %.2000s; want 500 with the count of the rest", code, reload)
		}
		b.ReportMetric(float64(len(reload)), "reload-7MB-B")
		b.ReportMetric(peakRSS(b, y.pid())/(1<<20), "reload-7MB-peak-RSS-MiB")
		y.stop()
		b.ReportMetric(float64(max(longestLine(x.logs.String()), longestLine(y.logs.String()))), "log-line-max-B")
	}
}

// benchExporter is the exporter binary serving for a benchmark.
type benchExporter struct {
	b    *testing.B
	base string
	proc *testutil.Process
	logs *testutil.SyncBuffer
}

// startBenchExporter starts the binary on the providers file with lifecycle on and waits for
// its first round (/-/ready).
func startBenchExporter(b *testing.B, providers string, args ...string) *benchExporter {
	b.Helper()
	x := &benchExporter{b: b, logs: &testutil.SyncBuffer{}}
	cmd := exec.Command(binary(b), append([]string{"--config.file=" + providers, "--web.listen-address=127.0.0.1:0",
		"--log.format=json", "--log.level=debug", "--web.enable-lifecycle", "--provider-check-interval=10s"}, args...)...)
	cmd.Stdout, cmd.Stderr = x.logs, x.logs
	x.proc = testutil.StartProcess(b, cmd)
	x.base = "http://" + testutil.ListenAddress(b, x.logs, x.proc.Exited)
	testutil.Eventually(b, 30*time.Second, "the first round", func() bool {
		code, _ := x.get("/-/ready")
		return code == http.StatusOK
	})
	return x
}

func (x *benchExporter) pid() int { return x.proc.Cmd.Process.Pid }

func (x *benchExporter) get(path string) (int, string) {
	x.b.Helper()
	return x.do(http.MethodGet, path)
}

func (x *benchExporter) do(method, path string) (int, string) {
	x.b.Helper()
	return testutil.Request(x.b, &http.Client{Timeout: 30 * time.Second}, method, x.base+path)
}

// stop ends the process with SIGTERM and waits for it.
func (x *benchExporter) stop() {
	x.b.Helper()
	if err := x.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		x.b.Fatal(err)
	}
	x.proc.Wait()
}
