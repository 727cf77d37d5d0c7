package e2e

import (
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

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kvmstandin"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
)

// shardBenchInterval is the check interval of BenchmarkShardedFleet's exporters (the timeout is
// the derived min(15s, interval)), and shardBenchRounds how many intervals its CPU is measured over.
const (
	shardBenchInterval = 15 * time.Second
	shardBenchRounds   = 4
)

// BenchmarkShardedFleet runs the exporter binary against a fleet of stand-in KVM hosts
// (internal/testenv/kvmstandin, served by its command in a process of its own: not KVM hosts;
// default 5,000, PHE_BENCH_SHARD_HOSTS sets it), first as one unsharded replica, then as three
// replicas sharing it (--shard.enabled, their Leases on a real kube-apiserver), restarted one
// by one as a rollout does (the first of them started alone and linked every host). Once every
// host is reported up (by the one replica; across the three, each host by exactly one), each
// process's CPU is read from /proc over shardBenchRounds check intervals, then its resident set.
//
// Reported: the one replica's CPU in cores (one-cpu-cores) and resident and peak memory
// (one-rss-MiB, one-peak-rss-MiB); of the three, the busiest's CPU and the largest's memory
// (shard-cpu-cores-max, shard-rss-MiB-max, shard-peak-rss-MiB-max), the smallest's memory
// (shard-rss-MiB-min: the last restarted, which never carried more than its share), their sums
// (shard-cpu-cores-sum, shard-rss-MiB-sum), and the most targets one of them owns
// (shard-owned-max). The figures are in docs/benchmarks.md.
func BenchmarkShardedFleet(b *testing.B) {
	bin := binary(b)
	n := 5000
	if v := os.Getenv("PHE_BENCH_SHARD_HOSTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 3 {
			b.Fatalf("PHE_BENCH_SHARD_HOSTS=%q: want a whole number of 3 or more", v)
		}
	}
	fleet := kvmstandin.StartProcess(b, kvmstandin.Counts{Healthy: n}, 0, 0)
	providers := filepath.Join(b.TempDir(), "providers.yml")
	testutil.ReplaceFile(b, providers, standInProviders(fleet.KVMConfig(), kvm.DefaultTCPTimeout, kvm.DefaultSSHTimeout, ""))
	env := kube.Start(b)
	common := []string{"--config.file=" + providers, "--provider-check-interval=" + shardBenchInterval.String()}

	for b.Loop() {
		one := startShardBenchReplica(b, bin, "one", common...)
		waitShardCoverage(b, []*shardBenchReplica{one}, n)
		oneCPU, oneRSS, onePeak := measureShardReplicas(b, []*shardBenchReplica{one})
		one.stop()
		b.ReportMetric(oneCPU[0], "one-cpu-cores")
		b.ReportMetric(oneRSS[0], "one-rss-MiB")
		b.ReportMetric(onePeak[0], "one-peak-rss-MiB")

		var shards []*shardBenchReplica
		startShard := func(i int) *shardBenchReplica {
			name := fmt.Sprintf("shard-%d", i)
			return startShardBenchReplica(b, bin, name, append(common, "--shard.enabled",
				"--shard.identity="+name, "--shard.kubeconfig="+env.Kubeconfig, "--shard.lease-namespace=default")...)
		}
		for i := range 3 {
			shards = append(shards, startShard(i))
		}
		waitShardCoverage(b, shards, n)
		// The first replica was alone when it started and linked every host; a rollout
		// restarts each replica in turn, and each then joins the others and links its share
		// only: the steady state measured below.
		for i := range shards {
			shards[i].stop()
			shards[i] = startShard(i)
			waitShardCoverage(b, shards, n)
		}
		cpu, rss, peak := measureShardReplicas(b, shards)
		owned, partBytes := 0, 0.0
		for _, s := range shards {
			owned = max(owned, s.up())
			partBytes = max(partBytes, s.partBytes())
		}
		for _, s := range shards {
			s.stop()
		}
		var cpuMax, cpuSum, rssMax, rssSum, peakMax float64
		rssMin := rss[0]
		for i := range shards {
			cpuMax, cpuSum = max(cpuMax, cpu[i]), cpuSum+cpu[i]
			rssMax, rssMin, rssSum = max(rssMax, rss[i]), min(rssMin, rss[i]), rssSum+rss[i]
			peakMax = max(peakMax, peak[i])
		}
		b.ReportMetric(rssMin, "shard-rss-MiB-min")
		b.ReportMetric(cpuMax, "shard-cpu-cores-max")
		b.ReportMetric(cpuSum, "shard-cpu-cores-sum")
		b.ReportMetric(rssMax, "shard-rss-MiB-max")
		b.ReportMetric(rssSum, "shard-rss-MiB-sum")
		b.ReportMetric(peakMax, "shard-peak-rss-MiB-max")
		b.ReportMetric(float64(owned), "shard-owned-max")
		b.ReportMetric(partBytes, "shard-part-bytes-max")
	}
}

// shardBenchReplica is one exporter process of BenchmarkShardedFleet.
type shardBenchReplica struct {
	b    *testing.B
	name string
	base string
	proc *testutil.Process
	logs *testutil.SyncBuffer
}

func startShardBenchReplica(b *testing.B, bin, name string, args ...string) *shardBenchReplica {
	b.Helper()
	r := &shardBenchReplica{b: b, name: name, logs: &testutil.SyncBuffer{}}
	cmd := exec.Command(bin, append([]string{"--web.listen-address=127.0.0.1:0", "--log.format=json"}, args...)...)
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	r.proc = testutil.StartProcess(b, cmd)
	r.base = "http://" + testutil.ListenAddress(b, r.logs, r.proc.Exited)
	return r
}

func (r *shardBenchReplica) pid() int { return r.proc.Cmd.Process.Pid }

// up counts the targets the replica reports up on /metrics.
func (r *shardBenchReplica) up() int {
	r.b.Helper()
	code, body := testutil.Request(r.b, &http.Client{Timeout: 30 * time.Second}, http.MethodGet, r.base+"/metrics")
	if code != http.StatusOK {
		return 0
	}
	n := 0
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "proxy_operator_provider_target_up{") && strings.HasSuffix(line, " 1") {
			n++
		}
	}
	return n
}

// partBytes is the size of the part the replica publishes in its Lease (its verdicts).
func (r *shardBenchReplica) partBytes() float64 {
	r.b.Helper()
	code, body := testutil.Request(r.b, &http.Client{Timeout: 30 * time.Second}, http.MethodGet, r.base+"/metrics")
	if code != http.StatusOK {
		r.b.Fatalf("%s/metrics: %d", r.base, code)
	}
	v, ok := testutil.Metric(r.b, body, "proxy_operator_shard_part_bytes")
	if !ok {
		r.b.Fatalf("%s/metrics has no proxy_operator_shard_part_bytes", r.base)
	}
	return v
}

func (r *shardBenchReplica) stop() {
	r.b.Helper()
	if err := r.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.b.Fatal(err)
	}
	r.proc.Wait()
}

// waitShardCoverage waits until the replicas together report every one of n hosts up, each by
// one replica (the sum of their counts is n: a handover's duplicate would make it more), for two
// polls in a row.
func waitShardCoverage(b *testing.B, rs []*shardBenchReplica, n int) {
	b.Helper()
	steady := 0
	testutil.Eventually(b, 10*time.Minute, fmt.Sprintf("%d hosts up, each reported once", n), func() bool {
		sum := 0
		for _, r := range rs {
			if r.proc.Exited() {
				b.Fatalf("%s exited:\n%s", r.name, r.logs.String())
			}
			sum += r.up()
		}
		if sum == n {
			steady++
		} else {
			steady = 0
		}
		return steady >= 2
	})
}

// measureShardReplicas reads each replica's CPU (in cores, over shardBenchRounds intervals), then
// its resident and peak resident memory in MiB.
func measureShardReplicas(b *testing.B, rs []*shardBenchReplica) (cpu, rss, peak []float64) {
	b.Helper()
	start := time.Now()
	var before []time.Duration
	for _, r := range rs {
		before = append(before, procCPU(b, r.pid()))
	}
	time.Sleep(shardBenchRounds * shardBenchInterval)
	wall := time.Since(start)
	for i, r := range rs {
		cpu = append(cpu, (procCPU(b, r.pid())-before[i]).Seconds()/wall.Seconds())
		rss = append(rss, procStatusKiB(b, r.pid(), "VmRSS")/1024)
		peak = append(peak, procStatusKiB(b, r.pid(), "VmHWM")/1024)
	}
	return cpu, rss, peak
}

// procCPU is the user and system CPU time the process pid has used (/proc/PID/stat's utime and
// stime, in clock ticks of 1/100 s).
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	// utime and stime are the 14th and 15th fields of the line, the 12th and 13th after the name.
	if len(fields) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %q: %v", pid, f, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// procStatusKiB is the field of /proc/PID/status (VmRSS, VmHWM) in KiB.
func procStatusKiB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("%s %q: %v", field, v, err)
			}
			return kib
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
