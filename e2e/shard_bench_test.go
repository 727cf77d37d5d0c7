package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/shard"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// shardBenchRounds is how many check intervals BenchmarkShardedFleet measures over (CPU and the
// control plane), shardBenchDown the share of its hosts that are down, and shardBench* its
// knobs: the hosts (PHE_BENCH_SHARD_HOSTS, default 3,600), the replicas (PHE_BENCH_SHARD_REPLICAS,
// default 3), the check interval (PHE_BENCH_SHARD_INTERVAL, default 1m; the timeout is the
// derived min(15s, interval)), the replicas killed at the end (PHE_BENCH_SHARD_KILL, default 1),
// members that check nothing (PHE_BENCH_SHARD_PHANTOMS, default 0: see startPhantoms; with them
// the phantoms are the ones killed), the memory limit the replicas run under
// (PHE_BENCH_SHARD_LIMIT_MIB, default none: see shardBenchKnobs.limit)
// and whether one unsharded replica is measured first (PHE_BENCH_SHARD_ONE=0 skips it: at
// 50,000 hosts one replica needs about 6 GiB, and more open files than a limit of 20,000).
const (
	shardBenchRounds = 3
	shardBenchDown   = 0.3
	// shardBenchHostsPerProcess is the most hosts one stand-in process serves: two open files
	// a host (a listener and a client's connection) stay within a limit of 20,000.
	shardBenchHostsPerProcess = 8000
	// shardBenchReloadStagger is the pause between two replicas' reloads into the fleet.
	shardBenchReloadStagger = 20 * time.Second
)

// shardBenchKnobs are BenchmarkShardedFleet's settings, from the environment.
type shardBenchKnobs struct {
	hosts, replicas, kill, phantoms int
	// limitMiB is the memory limit each replica runs under, in MiB (0: none).
	limitMiB int
	interval time.Duration
	one      bool
}

// limit is the memory limit each replica runs under (0: none): a memory cgroup of its own, as a
// container's, where --auto-gomemlimit (on by default) sets the runtime's soft limit to 0.9 of
// it and the kernel kills the replica past it.
func (k shardBenchKnobs) limit() int64 { return int64(k.limitMiB) << 20 }

func readShardBenchKnobs(b *testing.B) shardBenchKnobs {
	b.Helper()
	k := shardBenchKnobs{hosts: 3600, replicas: 3, kill: 1, interval: time.Minute, one: true}
	for _, v := range []struct {
		env string
		to  *int
		min int
	}{{"PHE_BENCH_SHARD_HOSTS", &k.hosts, 10}, {"PHE_BENCH_SHARD_REPLICAS", &k.replicas, 1}, {"PHE_BENCH_SHARD_KILL", &k.kill, 1}, {"PHE_BENCH_SHARD_PHANTOMS", &k.phantoms, 0}, {"PHE_BENCH_SHARD_LIMIT_MIB", &k.limitMiB, 0}} {
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
	switch {
	case k.replicas+k.phantoms < 2:
		b.Fatalf("PHE_BENCH_SHARD_REPLICAS=%d and PHE_BENCH_SHARD_PHANTOMS=%d: a shard needs two members or more", k.replicas, k.phantoms)
	case k.phantoms == 0 && k.kill >= k.replicas:
		b.Fatalf("PHE_BENCH_SHARD_KILL=%d: want fewer than the %d replicas", k.kill, k.replicas)
	case k.phantoms > 0 && k.kill > k.phantoms:
		b.Fatalf("PHE_BENCH_SHARD_KILL=%d: with phantoms, the phantoms are killed: want at most the %d phantoms", k.kill, k.phantoms)
	}
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
// (test/testenv/kvmstandin, served by its command in processes of their own, at most
// shardBenchHostsPerProcess hosts each: not KVM hosts) shaped like a real one (shardBenchCounts),
// one kvm provider per stand-in process, with failureThreshold 3 and successThreshold 2, so that
// the counts a part carries have aged to their caps before anything is measured.
//
// Unless PHE_BENCH_SHARD_ONE=0, it first measures one unsharded replica. Then the replicas of the
// shard (--shard.enabled, their Leases and ProviderHealthParts on a real kube-apiserver, the
// ProviderHealth writer on with leader election) start with no targets (heartbeats only) for one
// interval, for the control plane's idle rates: bytes received by etcd
// (etcd_network_client_grpc_received_bytes_total) and written to its log
// (etcd_disk_wal_write_bytes_total), bytes the API server answered (the sums of
// apiserver_response_sizes, GET and LIST, and apiserver_watch_events_sizes). Then the fleet is
// given to them with a reload (SIGHUP), so each replica, seeing all the others, links its share
// only, as after a rollout. Once every healthy host is reported up and every down host down,
// each target by exactly one replica, each process's CPU and the control plane are read over
// shardBenchRounds check intervals, then each process's resident set, how old the oldest
// verdict is (it must be within one interval plus the timeout), and that no verdict was left
// out of a part and the ProviderHealth objects count the whole fleet. Last, the worst case:
// PHE_BENCH_SHARD_KILL replicas (default 1) are killed with SIGKILL; a sampler reads every
// survivor's targets every shardBenchGapPoll until the survivors report the whole fleet again
// and one more interval has passed; the longest time a target went unreported must be within
// the lease plus one interval (and a poll), the ProviderHealth objects whole again.
//
// Reported: the one replica's CPU in cores and resident and peak memory (one-*); of the shard,
// the busiest's CPU and the largest's memory (shard-cpu-cores-max, shard-rss-MiB-max,
// shard-peak-rss-MiB-max), the smallest's memory (shard-rss-MiB-min), their sums, the most
// targets one of them owns (shard-owned-max), the largest part (shard-part-bytes-max) and the
// parts' bytes per verdict (part-bytes-per-verdict: the sum of proxy_operator_shard_part_bytes
// over the sum of owned targets), the part writes per round of all replicas together
// (part-writes-per-round), the ProviderHealth status writes and Events per round
// (ph-status-writes-per-round, ph-events-per-round), the oldest verdict's age
// (verdict-age-s-max), and the control plane's cost per verdict per round with the idle rates
// subtracted (etcd-recv-B/verdict-round, etcd-wal-B/verdict-round,
// api-answered-B/verdict-round); after the kill, the longest gap (killed-gap-s-max), the
// survivors' largest peak memory (killed-peak-rss-MiB-max) and share (killed-owned-max). The
// figures are in docs/benchmarks.md.
func BenchmarkShardedFleet(b *testing.B) {
	bin := binary(b)
	k := readShardBenchKnobs(b)
	var counts kvmstandin.Counts
	text := "providers:\n"
	for first := 0; first < k.hosts; first += shardBenchHostsPerProcess {
		c := shardBenchCounts(min(shardBenchHostsPerProcess, k.hosts-first))
		c.First = first
		fleet := kvmstandin.StartProcess(b, c, 0, 0)
		p := standInProviders(fleet.KVMConfig(), kvm.DefaultTCPTimeout, kvm.DefaultSSHTimeout, "")
		p = strings.TrimPrefix(p, "providers:\n")
		p = strings.Replace(p, "  - name: fleet\n", fmt.Sprintf("  - name: fleet-%d\n", first/shardBenchHostsPerProcess), 1)
		text += strings.Replace(p, "    type: kvm\n", "    type: kvm\n    failureThreshold: 3\n    successThreshold: 2\n", 1)
		counts.Healthy, counts.Silent, counts.Dropping = counts.Healthy+c.Healthy, counts.Silent+c.Silent, counts.Dropping+c.Dropping
		counts.Refusing, counts.PoolInactive, counts.PoolInaccessible = counts.Refusing+c.Refusing, counts.PoolInactive+c.PoolInactive, counts.PoolInaccessible+c.PoolInaccessible
	}
	dir := b.TempDir()
	providers := filepath.Join(dir, "providers.yml")
	testutil.ReplaceFile(b, providers, text)
	env := kube.Start(b)
	env.ApplyCRDFile(b, repoFile("deploy", "crd"))
	interval := "--provider-check-interval=" + k.interval.String()
	// The fleet inline (names and addresses) is a providers file of about 70 bytes a host.
	common := []string{"--config.file=" + providers, interval, "--config.max-size=64MiB"}

	for b.Loop() {
		startShard := func(i int, args ...string) *shardBenchReplica {
			name := fmt.Sprintf("shard-%d", i)
			return startShardBenchReplica(b, bin, name, k.limit(), append(args, "--shard.enabled",
				"--shard.identity="+name, "--shard.kubeconfig="+env.Kubeconfig, "--shard.lease-namespace=default",
				"--crd.enabled", "--crd.leader-elect", "--crd.kubeconfig="+env.Kubeconfig, "--crd.lease-namespace=default")...)
		}

		if k.one {
			one := startShardBenchReplica(b, bin, "one", k.limit(), common...)
			waitShardCoverage(b, []*shardBenchReplica{one}, counts, true)
			oneCPU, oneRSS, onePeak := measureShardReplicas(b, []*shardBenchReplica{one}, k.interval)
			one.stop()
			b.ReportMetric(oneCPU[0], "one-cpu-cores")
			b.ReportMetric(oneRSS[0], "one-rss-MiB")
			b.ReportMetric(onePeak[0], "one-peak-rss-MiB")
		}

		// Idle: the replicas with no targets, heartbeats only (and the ProviderHealth writer's
		// Lease).
		live := filepath.Join(dir, "live.yml")
		testutil.ReplaceFile(b, live, "providers: []\n")
		var shards []*shardBenchReplica
		for i := range k.replicas {
			shards = append(shards, startShard(i, "--config.file="+live, interval, "--config.max-size=64MiB"))
		}
		phantoms := startPhantoms(b, env, k.phantoms)
		waitShardMembers(b, shards, k.replicas+k.phantoms)
		idleStart := readControlPlane(b, env)
		time.Sleep(k.interval)
		idleRate := readControlPlane(b, env).sub(idleStart).per(time.Since(idleStart.at))

		// The fleet, given to replicas that all see each other (a reload): each links its share
		// only, as after a rollout.
		testutil.ReplaceFile(b, live, text)
		reloaded := float64(time.Now().Unix())
		for i, s := range shards {
			if i > 0 {
				// Each replica's first round dials its share (2-4 ms of CPU a host, and as
				// much in the stand-ins): one at a time, as replicas on nodes of their own
				// would not compete for two cores.
				time.Sleep(shardBenchReloadStagger)
			}
			if err := s.proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
				b.Fatal(err)
			}
		}
		waitReloaded(b, shards, reloaded)
		if k.phantoms > 0 {
			waitShardShares(b, shards)
		} else {
			waitShardCoverage(b, shards, counts, true)
		}
		const statusWrites, eventWrites = `proxy_operator_crd_writer_writes_total{kind="status"`, `proxy_operator_crd_writer_writes_total{kind="event"`
		writes0, status0, events0 := 0.0, 0.0, 0.0
		for _, s := range shards {
			writes0 += s.metric("proxy_operator_shard_part_writes_total")
			status0 += s.metricSum(statusWrites)
			events0 += s.metricSum(eventWrites)
		}
		cp0 := readControlPlane(b, env)
		cpu, rss, peak := measureShardReplicas(b, shards, k.interval)
		cp := readControlPlane(b, env).sub(cp0)
		rounds := cp.wall.Seconds() / k.interval.Seconds()
		writes, owned, ownedMax, partBytes, partMax, unpublished, status, events := 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
		var oldest time.Duration
		for _, s := range shards {
			writes += s.metric("proxy_operator_shard_part_writes_total")
			status += s.metricSum(statusWrites)
			events += s.metricSum(eventWrites)
			o := s.metricSum("proxy_operator_shard_owned_targets{")
			owned, ownedMax = owned+o, max(ownedMax, o)
			p := s.metric("proxy_operator_shard_part_bytes")
			partBytes, partMax = partBytes+p, max(partMax, p)
			unpublished += s.metric("proxy_operator_shard_unpublished_targets")
			oldest = max(oldest, s.oldestCheck())
		}
		if unpublished > 0 {
			b.Errorf("%.0f verdicts were left out of their replicas' parts", unpublished)
		}
		if bound := k.interval + shardBenchTimeout(k.interval); oldest > bound {
			b.Errorf("the oldest verdict was last checked %s ago: more than one interval plus the timeout (%s)", oldest.Round(time.Second), bound)
		}
		if k.phantoms == 0 {
			waitProviderHealthWhole(b, env, counts)
		}
		logEvents(b, env)

		// The Go runtime's own view of the busiest replica (the largest heap): the heap in use
		// (live objects and garbage not yet collected) and the goroutines' stacks.
		heapMax, stackMax, goroutinesMax := 0.0, 0.0, 0.0
		for _, s := range shards {
			if h := s.metric("go_memstats_heap_inuse_bytes"); h > heapMax {
				heapMax, stackMax, goroutinesMax = h, s.metric("go_memstats_stack_inuse_bytes"), s.metric("go_goroutines")
			}
		}
		b.ReportMetric(heapMax/(1<<20), "shard-heap-inuse-MiB-max")
		b.ReportMetric(stackMax/(1<<20), "shard-stack-MiB")
		b.ReportMetric(goroutinesMax, "shard-goroutines")

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
		b.ReportMetric(oldest.Seconds(), "verdict-age-s-max")
		b.ReportMetric((status-status0)/rounds, "ph-status-writes-per-round")
		b.ReportMetric((events-events0)/rounds, "ph-events-per-round")
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

		if k.phantoms > 0 {
			// The worst case: k.kill phantoms gone at once (their Leases left to expire); the
			// real replicas take their shares.
			for _, stop := range phantoms[:k.kill] {
				stop()
			}
			waitShardMembers(b, shards, k.replicas+k.phantoms-k.kill)
			waitShardShares(b, shards)
			time.Sleep(k.interval) // a round of the new shares at their peak
			killPeak, killOwned := 0.0, 0.0
			for _, s := range shards {
				killPeak = max(killPeak, procStatusKiB(b, s.pid(), "VmHWM")/1024)
				killOwned = max(killOwned, s.metricSum("proxy_operator_shard_owned_targets{"))
			}
			b.ReportMetric(killPeak, "killed-peak-rss-MiB-max")
			b.ReportMetric(killOwned, "killed-owned-max")
			for _, s := range shards {
				s.stop()
			}
			continue
		}

		// The worst case: k.kill replicas killed at once (SIGKILL, their Leases left to
		// expire); the others take their shares.
		survivors := shards[k.kill:]
		gaps := startShardGapSampler(b, shards, survivors)
		for _, s := range shards[:k.kill] {
			s.kill()
		}
		// Reported once each: the survivors' rounds, a quarter longer, may not fit the timeout on
		// a loaded machine, and a healthy host not reached reads Timeout (reported, not up).
		waitShardCoverage(b, survivors, counts, false)
		time.Sleep(k.interval) // a round of the new shares at their peak
		longest := gaps.stop()
		killedUp := 0
		for _, s := range survivors {
			_, u := s.targets()
			killedUp += u
		}
		if bound := shard.DefaultLeaseDuration + k.interval + shardBenchGapPoll; longest > bound {
			b.Errorf("a target went unreported for %s after %d replicas were killed: more than the lease plus one interval (and a poll: %s)",
				longest.Round(time.Second), k.kill, bound)
		}
		waitProviderHealthWhole(b, env, counts)
		killPeak, killOwned := 0.0, 0.0
		for _, s := range survivors {
			killPeak = max(killPeak, procStatusKiB(b, s.pid(), "VmHWM")/1024)
			killOwned = max(killOwned, s.metricSum("proxy_operator_shard_owned_targets{"))
		}
		b.ReportMetric(longest.Seconds(), "killed-gap-s-max")
		b.ReportMetric(float64(killedUp), "killed-hosts-up")
		b.ReportMetric(killPeak, "killed-peak-rss-MiB-max")
		b.ReportMetric(killOwned, "killed-owned-max")
		for _, s := range survivors {
			s.stop()
		}
	}
}

// startPhantoms makes n members of the shard that check nothing and publish no part: the
// shard's Membership itself, renewing a Lease each (phantom-0, ...) in this process, so that the
// real replicas own fleet/(replicas+n) of the hosts. A phantom's stop function ends it without
// releasing its Lease, as a kill does; every phantom is stopped at the benchmark's end.
func startPhantoms(b *testing.B, env *kube.Env, n int) []func() {
	b.Helper()
	var stops []func()
	for i := range n {
		m, err := shard.NewMembership(shard.MembershipOptions{Config: env.AdminConfig, Namespace: "default",
			Identity: fmt.Sprintf("phantom-%d", i), Instance: "provider-health-exporter"})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx) }()
		stop := sync.OnceFunc(func() { cancel(); <-done })
		b.Cleanup(stop)
		stops = append(stops, stop)
	}
	return stops
}

// waitShardShares waits until every replica reports a verdict for each target it owns (the
// sum of proxy_operator_shard_owned_targets), with none unchecked, for two polls in a row:
// with phantoms, the fleet is not covered, but each real replica carries its share.
func waitShardShares(b *testing.B, rs []*shardBenchReplica) {
	b.Helper()
	steady := 0
	testutil.EventuallyEvery(b, 15*time.Minute, shardBenchPoll, "each replica reports every target it owns", func() bool {
		for _, r := range rs {
			if r.proc.Exited() {
				b.Fatalf("%s exited:\n%s", r.name, r.logs.String())
			}
			body, err := r.scrape()
			if err != nil {
				steady = 0
				return false
			}
			owned, reported, unchecked := 0.0, 0.0, 0.0
			for line := range strings.SplitSeq(body, "\n") {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				switch {
				case strings.HasPrefix(line, "proxy_operator_shard_owned_targets{"):
					owned += v
				case strings.HasPrefix(line, "proxy_operator_provider_target_up{"):
					reported++
				case strings.HasPrefix(line, "proxy_operator_provider_targets_unchecked{"):
					unchecked += v
				}
			}
			if owned == 0 || reported != owned || unchecked > 0 {
				steady = 0
				return false
			}
		}
		steady++
		return steady >= 2
	})
}

// shardBenchTimeout is the check timeout the exporter derives from the interval.
func shardBenchTimeout(interval time.Duration) time.Duration { return min(15*time.Second, interval) }

// shardBenchPoll is how often the benchmark's waits read the replicas (their /metrics, the
// ProviderHealth objects): each read of a replica owning thousands of targets costs it and the
// benchmark tens of milliseconds of CPU, which a tighter poll would add to what is measured.
const shardBenchPoll = 2 * time.Second

// shardBenchGapPoll is how often the gap sampler reads every survivor's targets.
const shardBenchGapPoll = 5 * time.Second

// shardGapSampler reads every replica's reported targets every shardBenchGapPoll and keeps the
// longest time a target went unreported: from the last read that had it to the first that has
// it again (an upper bound of the true gap, by at most a poll and a read). Its first read is of
// the replicas before (those about to be killed too), the others of the survivors rs.
type shardGapSampler struct {
	done    chan struct{}
	stopped chan time.Duration
}

func startShardGapSampler(b *testing.B, before, rs []*shardBenchReplica) *shardGapSampler {
	b.Helper()
	g := &shardGapSampler{done: make(chan struct{}), stopped: make(chan time.Duration, 1)}
	// A replica that does not answer within the bound reports nothing in that read: as for
	// Prometheus, whose scrape of it fails.
	read := func(rs []*shardBenchReplica) map[string]bool {
		seen := map[string]bool{}
		for _, r := range rs {
			ts, err := r.reportedTargets()
			if err != nil {
				b.Logf("gap sampler: %s: %v", r.name, err)
			}
			for _, t := range ts {
				seen[t] = true
			}
		}
		return seen
	}
	last := map[string]time.Time{}
	now := time.Now()
	for t := range read(before) {
		last[t] = now
	}
	go func() {
		var longest time.Duration
		tick := time.NewTicker(shardBenchGapPoll)
		defer tick.Stop()
		for {
			select {
			case <-g.done:
				now := time.Now()
				for _, at := range last {
					longest = max(longest, now.Sub(at))
				}
				g.stopped <- longest
				return
			case <-tick.C:
			}
			seen := read(rs)
			now := time.Now()
			for t := range seen {
				if at, ok := last[t]; ok {
					longest = max(longest, now.Sub(at))
				}
				last[t] = now
			}
		}
	}()
	return g
}

// stop ends the sampling and returns the longest gap, counting a target not reported since its
// last read up to now.
func (g *shardGapSampler) stop() time.Duration {
	close(g.done)
	return <-g.stopped
}

// logEvents logs the Events the ProviderHealth writer recorded, counted by reason and count
// (how many times each was seen), with one message of each.
func logEvents(b *testing.B, env *kube.Env) {
	b.Helper()
	cs, err := kubernetes.NewForConfig(env.AdminConfig)
	if err != nil {
		b.Fatal(err)
	}
	list, err := cs.CoreV1().Events("default").List(b.Context(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	type kind struct {
		reason string
		count  int32
	}
	n, example := map[kind]int{}, map[kind]string{}
	for _, e := range list.Items {
		k := kind{e.Reason, e.Count}
		n[k]++
		example[k] = e.Message
	}
	for k, c := range n {
		b.Logf("Events: %d of reason %s seen %d times, e.g. %q", c, k.reason, k.count, example[k])
	}
}

// waitProviderHealthWhole waits until the ProviderHealth objects (one a stand-in process's
// provider) count every host of the fleet c and its healthy ones ready.
func waitProviderHealthWhole(b *testing.B, env *kube.Env, c kvmstandin.Counts) {
	b.Helper()
	dyn, err := dynamic.NewForConfig(env.AdminConfig)
	if err != nil {
		b.Fatal(err)
	}
	var last string
	testutil.EventuallyEvery(b, 5*time.Minute, shardBenchPoll, fmt.Sprintf("the ProviderHealth objects count %d targets, %d ready", c.Total(), c.Healthy), func() bool {
		list, err := dyn.Resource(phResource).List(b.Context(), metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		total, ready := int64(0), int64(0)
		for _, o := range list.Items {
			t, _, _ := unstructured.NestedInt64(o.Object, "status", "totalTargets")
			r, _, _ := unstructured.NestedInt64(o.Object, "status", "readyTargets")
			total, ready = total+t, ready+r
		}
		last = fmt.Sprintf("%d objects: %d targets, %d ready", len(list.Items), total, ready)
		return total == int64(c.Total()) && ready == int64(c.Healthy)
	})
	b.Logf("ProviderHealth whole: %s", last)
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

func startShardBenchReplica(b *testing.B, bin, name string, limit int64, args ...string) *shardBenchReplica {
	b.Helper()
	r := &shardBenchReplica{b: b, name: name, logs: &testutil.SyncBuffer{}}
	args = append([]string{"--web.listen-address=127.0.0.1:0", "--log.format=json"}, args...)
	cmd := exec.Command(bin, args...)
	if limit > 0 {
		// The shell moves itself into the replica's memory cgroup, then becomes the replica.
		procs := namedMemoryCgroup(b, fmt.Sprintf("phe-bench-%d-%s", os.Getpid(), name), limit)
		cmd = exec.Command("sh", append([]string{"-c", fmt.Sprintf(`echo $$ > %s && exec "$0" "$@"`, procs), bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	r.proc = testutil.StartProcess(b, cmd)
	r.base = "http://" + testutil.ListenAddress(b, r.logs, r.proc.Exited)
	return r
}

func (r *shardBenchReplica) pid() int { return r.proc.Cmd.Process.Pid }

// scrape reads the replica's /metrics within 30 s.
func (r *shardBenchReplica) scrape() (string, error) {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(r.base + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), err
}

// targets counts the targets the replica reports on /metrics, and those it reports up; none when
// it does not answer (on a loaded machine, a cold start's dials can hold it past the bound).
func (r *shardBenchReplica) targets() (reported, up int) {
	r.b.Helper()
	body, err := r.scrape()
	if err != nil {
		r.b.Logf("%s: %v", r.name, err)
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
	body, err := r.scrape()
	if err != nil {
		r.b.Fatalf("%s: %v", r.name, err)
	}
	v, ok := testutil.Metric(r.b, body, prefix)
	if !ok {
		r.b.Fatalf("%s/metrics has no %s", r.base, prefix)
	}
	return v
}

// metricSum is the sum of the replica's series that start with prefix (0 when it has none).
func (r *shardBenchReplica) metricSum(prefix string) float64 {
	r.b.Helper()
	body, err := r.scrape()
	if err != nil {
		r.b.Fatalf("%s: %v", r.name, err)
	}
	sum := 0.0
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				r.b.Fatalf("%s/metrics: %q: %v", r.base, line, err)
			}
			sum += v
		}
	}
	return sum
}

// reportedTargets lists the targets (their label sets) the replica reports on /metrics.
func (r *shardBenchReplica) reportedTargets() ([]string, error) {
	body, err := r.scrape()
	if err != nil {
		return nil, err
	}
	var ts []string
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "proxy_operator_provider_target_up{"); ok {
			ts = append(ts, rest[:strings.IndexByte(rest, '}')])
		}
	}
	return ts, nil
}

// oldestCheck is how long ago the replica's least recently checked target was checked
// (proxy_operator_provider_check_timestamp_seconds).
func (r *shardBenchReplica) oldestCheck() time.Duration {
	r.b.Helper()
	body, err := r.scrape()
	if err != nil {
		r.b.Fatalf("%s: %v", r.name, err)
	}
	now := time.Now()
	var oldest time.Duration
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, "proxy_operator_provider_check_timestamp_seconds{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			r.b.Fatalf("%s/metrics: %q: %v", r.base, line, err)
		}
		oldest = max(oldest, now.Sub(time.Unix(0, int64(v*1e9))))
	}
	return oldest
}

// kill ends the replica with SIGKILL: it releases nothing.
func (r *shardBenchReplica) kill() {
	r.b.Helper()
	if err := r.proc.Cmd.Process.Kill(); err != nil {
		r.b.Fatal(err)
	}
	_ = r.proc.Wait()
}

func (r *shardBenchReplica) stop() {
	r.b.Helper()
	if err := r.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.b.Fatal(err)
	}
	r.proc.Wait()
}

// waitReloaded waits until every replica has loaded its providers file since the Unix time
// since, logging which have not, and why, at every read that changes the answer.
func waitReloaded(b *testing.B, rs []*shardBenchReplica, since float64) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	last := ""
	for {
		var waiting []string
		for _, r := range rs {
			body, err := r.scrape()
			if err != nil {
				waiting = append(waiting, fmt.Sprintf("%s (%v)", r.name, err))
				continue
			}
			if v, _ := testutil.Metric(b, body, "proxy_operator_config_last_reload_success_timestamp_seconds"); v < since {
				ok, _ := testutil.Metric(b, body, "proxy_operator_config_last_reload_successful")
				waiting = append(waiting, fmt.Sprintf("%s (last reload successful: %v)", r.name, ok))
			}
		}
		if len(waiting) == 0 {
			return
		}
		if now := strings.Join(waiting, ", "); now != last {
			b.Logf("not reloaded yet: %s", now)
			last = now
		}
		if time.Now().After(deadline) {
			logs := rs[0].logs.String()
			b.Fatalf("replicas not reloaded within 5m: %s\n%s's last logs:\n%s", last, rs[0].name, logs[max(0, len(logs)-4096):])
		}
		time.Sleep(5 * time.Second)
	}
}

// waitShardMembers waits until each replica sees n members.
func waitShardMembers(b *testing.B, rs []*shardBenchReplica, n int) {
	b.Helper()
	testutil.EventuallyEvery(b, 5*time.Minute, shardBenchPoll, fmt.Sprintf("every replica sees %d members", n), func() bool {
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
// more), and with upWanted, its healthy hosts up and the others down (past failureThreshold),
// for two polls in a row.
func waitShardCoverage(b *testing.B, rs []*shardBenchReplica, c kvmstandin.Counts, upWanted bool) {
	b.Helper()
	steady := 0
	logged := time.Now()
	what := fmt.Sprintf("%d hosts reported once each", c.Total())
	if upWanted {
		what += fmt.Sprintf(", %d of them up", c.Healthy)
	}
	testutil.EventuallyEvery(b, 15*time.Minute, shardBenchPoll, what, func() bool {
		defer func() {
			if time.Since(logged) > time.Minute {
				logged = time.Now()
				var each []string
				for _, r := range rs {
					n, u := r.targets()
					each = append(each, fmt.Sprintf("%s %d (%d up)", r.name, n, u))
				}
				b.Logf("waiting for %s: %s", what, strings.Join(each, ", "))
			}
		}()
		reported, up := 0, 0
		for _, r := range rs {
			if r.proc.Exited() {
				b.Fatalf("%s exited:\n%s", r.name, r.logs.String())
			}
			n, u := r.targets()
			reported, up = reported+n, up+u
		}
		if reported == c.Total() && (!upWanted || up == c.Healthy) {
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
