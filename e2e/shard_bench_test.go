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

// shardBenchRounds is how many check intervals BenchmarkShardedFleet measures over (CPU and the
// control plane), shardBenchDown the share of its hosts that are down, and shardBench* its
// knobs: the hosts (PHE_BENCH_SHARD_HOSTS, default 3,600), the replicas (PHE_BENCH_SHARD_REPLICAS,
// default 3), the check interval (PHE_BENCH_SHARD_INTERVAL, default 1m; the timeout is the
// derived min(15s, interval)) and whether one unsharded replica is measured first
// (PHE_BENCH_SHARD_ONE=0 skips it: at 50,000 hosts one replica needs about 6 GiB).
const (
	shardBenchRounds = 3
	shardBenchDown   = 0.3
)

// shardBenchKnobs are BenchmarkShardedFleet's settings, from the environment.
type shardBenchKnobs struct {
	hosts, replicas int
	interval        time.Duration
	one             bool
}

func readShardBenchKnobs(b *testing.B) shardBenchKnobs {
	b.Helper()
	k := shardBenchKnobs{hosts: 3600, replicas: 3, interval: time.Minute, one: true}
	for _, v := range []struct {
		env string
		to  *int
		min int
	}{{"PHE_BENCH_SHARD_HOSTS", &k.hosts, 10}, {"PHE_BENCH_SHARD_REPLICAS", &k.replicas, 2}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < v.min {
				b.Fatalf("%s=%q: want a whole number of %d or more", v.env, s, v.min)
			}
			*v.to = n
		}
	}
	if s := os.Getenv("PHE_BENCH_SHARD_INTERVAL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Second {
			b.Fatalf("PHE_BENCH_SHARD_INTERVAL=%q: want a duration of 10s or more", s)
		}
		k.interval = d
	}
	k.one = os.Getenv("PHE_BENCH_SHARD_ONE") != "0"
	return k
}

// shardBenchCounts is a fleet of n hosts shaped like a data centre's (kvmstandin's Varied: hosts
// named hv-r<rack>-<n>.<site>.example.net, pools of varied sizes), shardBenchDown of them down,
// each down host in one of five ways (silent, dropping SYNs, refusing, pool inactive, pool
// inaccessible) and every message naming its host (its address or its hostname).
func shardBenchCounts(n int) kvmstandin.Counts {
	down := int(float64(n) * shardBenchDown)
	c := kvmstandin.Counts{Healthy: n - down, Varied: true}
	each := []*int{&c.Silent, &c.Dropping, &c.Refusing, &c.PoolInactive, &c.PoolInaccessible}
	for i := range down {
		*each[i%len(each)]++
	}
	return c
}

// BenchmarkShardedFleet runs the exporter binary against a fleet of stand-in KVM hosts
// (internal/testenv/kvmstandin, served by its command in a process of its own: not KVM hosts)
// shaped like a real one (shardBenchCounts) with failureThreshold 3 and successThreshold 2, so
// that the counts a part carries have aged to their caps before anything is measured.
//
// It first runs the replicas with no targets (heartbeats only) and reads the control plane's
// idle rates: bytes received by etcd (etcd_network_client_grpc_received_bytes_total) and
// written to its log (etcd_disk_wal_write_bytes_total), bytes the API server answered (the sums
// of apiserver_response_sizes, GET and LIST, and apiserver_watch_events_sizes). Then, unless
// PHE_BENCH_SHARD_ONE=0, one unsharded replica; then the replicas sharing the fleet
// (--shard.enabled, their Leases and ProviderHealthParts on a real kube-apiserver), restarted one
// by one as a rollout does. Once every healthy host is reported up and every down host down, each
// target by exactly one replica, each process's CPU and the control plane are read over
// shardBenchRounds check intervals, then each process's resident set.
//
// Reported: the one replica's CPU in cores and resident and peak memory (one-*); of the shard,
// the busiest's CPU and the largest's memory (shard-cpu-cores-max, shard-rss-MiB-max,
// shard-peak-rss-MiB-max), the smallest's memory (shard-rss-MiB-min), their sums, the most
// targets one of them owns (shard-owned-max), the largest part (shard-part-bytes-max) and the
// parts' bytes per verdict (part-bytes-per-verdict: the sum of proxy_operator_shard_part_bytes
// over the sum of owned targets), the part writes per round of all replicas together
// (part-writes-per-round), and the control plane's cost per verdict per round with the idle
// rates subtracted (etcd-recv-B/verdict-round, etcd-wal-B/verdict-round,
// api-answered-B/verdict-round). The figures are in docs/benchmarks.md.
func BenchmarkShardedFleet(b *testing.B) {
	bin := binary(b)
	k := readShardBenchKnobs(b)
	counts := shardBenchCounts(k.hosts)
	fleet := kvmstandin.StartProcess(b, counts, 0, 0)
	dir := b.TempDir()
	providers := filepath.Join(dir, "providers.yml")
	text := standInProviders(fleet.KVMConfig(), kvm.DefaultTCPTimeout, kvm.DefaultSSHTimeout, "")
	text = strings.Replace(text, "    type: kvm\n", "    type: kvm\n    failureThreshold: 3\n    successThreshold: 2\n", 1)
	testutil.ReplaceFile(b, providers, text)
	idleProviders := filepath.Join(dir, "idle.yml")
	testutil.ReplaceFile(b, idleProviders, "providers: []\n")
	env := kube.Start(b)
	env.ApplyCRDFile(b, repoFile("deploy", "crd"))
	interval := "--provider-check-interval=" + k.interval.String()
	common := []string{"--config.file=" + providers, interval}

	for b.Loop() {
		startShard := func(i int, args ...string) *shardBenchReplica {
			name := fmt.Sprintf("shard-%d", i)
			return startShardBenchReplica(b, bin, name, append(args, "--shard.enabled",
				"--shard.identity="+name, "--shard.kubeconfig="+env.Kubeconfig, "--shard.lease-namespace=default")...)
		}

		// Idle: the same replicas with no targets, heartbeats only.
		var idle []*shardBenchReplica
		for i := range k.replicas {
			idle = append(idle, startShard(i, "--config.file="+idleProviders, interval))
		}
		waitShardMembers(b, idle, k.replicas)
		idleStart := readControlPlane(b, env)
		time.Sleep(k.interval)
		idleRate := readControlPlane(b, env).sub(idleStart).per(time.Since(idleStart.at))
		for _, r := range idle {
			r.stop()
		}

		if k.one {
			one := startShardBenchReplica(b, bin, "one", common...)
			waitShardCoverage(b, []*shardBenchReplica{one}, counts)
			oneCPU, oneRSS, onePeak := measureShardReplicas(b, []*shardBenchReplica{one}, k.interval)
			one.stop()
			b.ReportMetric(oneCPU[0], "one-cpu-cores")
			b.ReportMetric(oneRSS[0], "one-rss-MiB")
			b.ReportMetric(onePeak[0], "one-peak-rss-MiB")
		}

		var shards []*shardBenchReplica
		for i := range k.replicas {
			shards = append(shards, startShard(i, common...))
		}
		waitShardCoverage(b, shards, counts)
		// The first replica was alone when it started and linked every host; a rollout
		// restarts each replica in turn, and each then joins the others and links its share
		// only: the steady state measured below.
		for i := range shards {
			shards[i].stop()
			shards[i] = startShard(i, common...)
			waitShardCoverage(b, shards, counts)
		}
		writes0 := 0.0
		for _, s := range shards {
			writes0 += s.metric("proxy_operator_shard_part_writes_total")
		}
		cp0 := readControlPlane(b, env)
		cpu, rss, peak := measureShardReplicas(b, shards, k.interval)
		cp := readControlPlane(b, env).sub(cp0)
		rounds := cp.wall.Seconds() / k.interval.Seconds()
		writes, owned, ownedMax, partBytes, partMax := 0.0, 0.0, 0.0, 0.0, 0.0
		for _, s := range shards {
			writes += s.metric("proxy_operator_shard_part_writes_total")
			o := s.metric("proxy_operator_shard_owned_targets{")
			owned, ownedMax = owned+o, max(ownedMax, o)
			p := s.metric("proxy_operator_shard_part_bytes")
			partBytes, partMax = partBytes+p, max(partMax, p)
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
		b.ReportMetric(ownedMax, "shard-owned-max")
		b.ReportMetric(partMax, "shard-part-bytes-max")
		b.ReportMetric(partBytes/owned, "part-bytes-per-verdict")
		b.ReportMetric((writes-writes0)/rounds, "part-writes-per-round")
		// The loaded rate less the idle one, over one interval, per verdict.
		perVerdictRound := func(loaded, idle float64) float64 {
			return (loaded/cp.wall.Seconds() - idle) * k.interval.Seconds() / float64(k.hosts)
		}
		b.ReportMetric(perVerdictRound(cp.etcdReceived, idleRate.etcdReceived), "etcd-recv-B/verdict-round")
		b.ReportMetric(perVerdictRound(cp.etcdWAL, idleRate.etcdWAL), "etcd-wal-B/verdict-round")
		b.ReportMetric(perVerdictRound(cp.answered, idleRate.answered), "api-answered-B/verdict-round")
		b.ReportMetric(perVerdictRound(cp.answeredParts, idleRate.answeredParts), "api-answered-parts-B/verdict-round")
		b.Logf("control plane over %s, loaded: etcd received %.0f B, WAL %.0f B, answered %.0f B (parts %.0f B); idle per second: %.0f, %.0f, %.0f (%.0f)",
			cp.wall.Round(time.Second), cp.etcdReceived, cp.etcdWAL, cp.answered, cp.answeredParts,
			idleRate.etcdReceived, idleRate.etcdWAL, idleRate.answered, idleRate.answeredParts)
	}
}

// controlPlane is one reading of the counters BenchmarkShardedFleet takes the control plane's
// cost from (or a difference of two readings, or a rate: then wall is the time between them).
type controlPlane struct {
	at   time.Time
	wall time.Duration
	// etcdReceived and etcdWAL: bytes etcd received from its clients (the API server) and wrote
	// to its log; answered: bytes the API server answered to GETs and LISTs and sent as watch
	// events; answeredParts the same for ProviderHealthParts only.
	etcdReceived, etcdWAL, answered, answeredParts float64
}

func readControlPlane(b *testing.B, env *kube.Env) controlPlane {
	b.Helper()
	etcd, err := env.EtcdMetrics()
	if err != nil {
		b.Fatal(err)
	}
	api, err := env.APIServerMetrics()
	if err != nil {
		b.Fatal(err)
	}
	const resp, watch, parts = "apiserver_response_sizes_sum", "apiserver_watch_events_sizes_sum", "providerhealthparts"
	return controlPlane{
		at:            time.Now(),
		etcdReceived:  etcd.Sum("etcd_network_client_grpc_received_bytes_total"),
		etcdWAL:       etcd.Sum("etcd_disk_wal_write_bytes_total"),
		answered:      api.Sum(resp) + api.Sum(watch),
		answeredParts: api.Sum(resp, "resource", parts) + api.Sum(watch, "resource", parts),
	}
}

// sub is c less an earlier reading d.
func (c controlPlane) sub(d controlPlane) controlPlane {
	return controlPlane{at: d.at, wall: c.at.Sub(d.at), etcdReceived: c.etcdReceived - d.etcdReceived,
		etcdWAL: c.etcdWAL - d.etcdWAL, answered: c.answered - d.answered, answeredParts: c.answeredParts - d.answeredParts}
}

// per is the difference c as rates per second over wall.
func (c controlPlane) per(wall time.Duration) controlPlane {
	s := wall.Seconds()
	return controlPlane{at: c.at, wall: time.Second, etcdReceived: c.etcdReceived / s, etcdWAL: c.etcdWAL / s,
		answered: c.answered / s, answeredParts: c.answeredParts / s}
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

// targets counts the targets the replica reports on /metrics, and those it reports up.
func (r *shardBenchReplica) targets() (reported, up int) {
	r.b.Helper()
	code, body := testutil.Request(r.b, &http.Client{Timeout: 30 * time.Second}, http.MethodGet, r.base+"/metrics")
	if code != http.StatusOK {
		return 0, 0
	}
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "proxy_operator_provider_target_up{") {
			reported++
			if strings.HasSuffix(line, " 1") {
				up++
			}
		}
	}
	return reported, up
}

// metric is the value of the first series of the replica's /metrics that starts with prefix.
func (r *shardBenchReplica) metric(prefix string) float64 {
	r.b.Helper()
	code, body := testutil.Request(r.b, &http.Client{Timeout: 30 * time.Second}, http.MethodGet, r.base+"/metrics")
	if code != http.StatusOK {
		r.b.Fatalf("%s/metrics: %d", r.base, code)
	}
	v, ok := testutil.Metric(r.b, body, prefix)
	if !ok {
		r.b.Fatalf("%s/metrics has no %s", r.base, prefix)
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

// waitShardMembers waits until each replica sees n members.
func waitShardMembers(b *testing.B, rs []*shardBenchReplica, n int) {
	b.Helper()
	testutil.Eventually(b, 5*time.Minute, fmt.Sprintf("every replica sees %d members", n), func() bool {
		for _, r := range rs {
			if r.proc.Exited() {
				b.Fatalf("%s exited:\n%s", r.name, r.logs.String())
			}
			if r.metric("proxy_operator_shard_members") != float64(n) {
				return false
			}
		}
		return true
	})
}

// waitShardCoverage waits until the replicas together report every host of the fleet c, each by
// one replica (the sum of their counts is the fleet's: a handover's duplicate would make it
// more), its healthy hosts up and the others down (past failureThreshold), for two polls in a
// row.
func waitShardCoverage(b *testing.B, rs []*shardBenchReplica, c kvmstandin.Counts) {
	b.Helper()
	steady := 0
	testutil.Eventually(b, 15*time.Minute, fmt.Sprintf("%d hosts reported once each, %d of them up", c.Total(), c.Healthy), func() bool {
		reported, up := 0, 0
		for _, r := range rs {
			if r.proc.Exited() {
				b.Fatalf("%s exited:\n%s", r.name, r.logs.String())
			}
			n, u := r.targets()
			reported, up = reported+n, up+u
		}
		if reported == c.Total() && up == c.Healthy {
			steady++
		} else {
			steady = 0
		}
		return steady >= 2
	})
}

// measureShardReplicas reads each replica's CPU (in cores, over shardBenchRounds intervals), then
// its resident and peak resident memory in MiB.
func measureShardReplicas(b *testing.B, rs []*shardBenchReplica, interval time.Duration) (cpu, rss, peak []float64) {
	b.Helper()
	start := time.Now()
	var before []time.Duration
	for _, r := range rs {
		before = append(before, procCPU(b, r.pid()))
	}
	time.Sleep(shardBenchRounds * interval)
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
func procStatusKiB(b testing.TB, pid int, field string) float64 {
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
