package exporter

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/provider-health-exporter/provider-health-exporter/checks/shard"
	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// shardedProviders is a kvm provider of eight hosts and a kubernetes provider, none of which a
// check contacts (the key and the kubeconfig do not exist).
func shardedProviders(t *testing.T) string {
	t.Helper()
	var hosts []string
	for i := 1; i <= 8; i++ {
		hosts = append(hosts, fmt.Sprintf(`{address: "127.0.0.1:%d", name: hv%d}`, i, i))
	}
	path := filepath.Join(t.TempDir(), "providers.yml")
	itestutil.ReplaceFile(t, path, `providers:
- name: lab
  type: kvm
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hosts: [`+strings.Join(hosts, ", ")+`]
- name: cluster
  type: kubernetes
  kubernetes:
    kubeconfig: /nonexistent/kubeconfig
`)
	return path
}

// A sharded replica checks and reports the hosts it owns and the providers owned whole it
// owns; proxy_operator_shard_owned_targets says how many per provider.
func TestShardedReplicaReportsWhatItOwns(t *testing.T) {
	members := []string{"phe-0", "phe-1"}
	var wantHosts []string
	for i := 1; i <= 8; i++ {
		if h := fmt.Sprintf("hv%d", i); shard.Owner(members, "lab/"+h) == "phe-0" {
			wantHosts = append(wantHosts, h)
		}
	}
	ownsCluster := shard.Owner(members, "cluster") == "phe-0"
	if len(wantHosts) == 0 || len(wantHosts) == 8 {
		t.Fatalf("phe-0 owns %v of the eight hosts: the test needs a split", wantHosts)
	}

	e, err := New(shardedProviders(t), time.Minute, 5*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	e.EnableSharding("phe-0", members, nil)
	runOneRound(t, e)

	snap := e.runner.Current()
	var gotHosts []string
	for _, ts := range snap.Providers[0].Targets {
		gotHosts = append(gotHosts, ts.Target)
	}
	if !slices.Equal(gotHosts, wantHosts) {
		t.Errorf("kvm verdicts %v, want the owned hosts %v", gotHosts, wantHosts)
	}
	clusterTargets := len(snap.Providers[1].Targets) + len(snap.Providers[1].Unchecked)
	if ownsCluster != (clusterTargets > 0) {
		t.Errorf("kubernetes provider: owned %v, but %d targets reported", ownsCluster, clusterTargets)
	}
	want := fmt.Sprintf(`# HELP proxy_operator_shard_owned_targets %s
# TYPE proxy_operator_shard_owned_targets gauge
proxy_operator_shard_owned_targets{provider="cluster"} %d
proxy_operator_shard_owned_targets{provider="lab"} %d
`, helpOf(t, e, "proxy_operator_shard_owned_targets"), clusterTargets, len(wantHosts))
	if err := testutil.GatherAndCompare(e.registry, strings.NewReader(want), "proxy_operator_shard_owned_targets"); err != nil {
		t.Error(err)
	}
	// Every replica says how many targets each provider has, owned or not: the mixin's
	// ProviderHealthShardTargetsUnreported compares it with the targets the replicas report.
	configured := fmt.Sprintf(`# HELP proxy_operator_shard_configured_targets %s
# TYPE proxy_operator_shard_configured_targets gauge
proxy_operator_shard_configured_targets{provider="cluster"} 1
proxy_operator_shard_configured_targets{provider="lab"} 8
`, helpOf(t, e, "proxy_operator_shard_configured_targets"))
	if err := testutil.GatherAndCompare(e.registry, strings.NewReader(configured), "proxy_operator_shard_configured_targets"); err != nil {
		t.Error(err)
	}
}

func helpOf(t *testing.T, e *Exporter, name string) string {
	mfs, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetHelp()
		}
	}
	t.Fatalf("no %s", name)
	return ""
}

// A target whose owner moves away is kept for two intervals (make before break), then let go;
// one that moves here is owned at once; both moves are counted.
func TestShardHandover(t *testing.T) {
	e, err := New(shardedProviders(t), time.Minute, 5*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	now := time.Unix(1_800_000_000, 0)
	e.EnableSharding("phe-0", []string{"phe-0"}, nil)
	e.shard.now = func() time.Time { return now }
	soon := 0
	e.shard.runSoon = func() { soon++ }

	var keys []string
	for i := 1; i <= 8; i++ {
		keys = append(keys, fmt.Sprintf("lab/hv%d", i))
	}
	keys = append(keys, "cluster")
	for _, k := range keys {
		if !e.shard.owns(k) {
			t.Fatalf("alone, phe-0 does not own %s", k)
		}
	}

	two := []string{"phe-0", "phe-1"}
	e.SetMembers(two)
	var leaving []string
	for _, k := range keys {
		if shard.Owner(two, k) != "phe-0" {
			leaving = append(leaving, k)
		}
		if !e.shard.owns(k) {
			t.Errorf("%s left phe-0 at once; it must be kept until the new owner has reported it", k)
		}
	}
	if len(leaving) == 0 {
		t.Fatal("nothing moved to phe-1: the test needs a move")
	}
	if got := testutil.ToFloat64(e.shard.handovers.WithLabelValues("out")); int(got) != len(leaving) {
		t.Errorf("handovers out %v, want %d", got, len(leaving))
	}
	if soon != 0 {
		t.Errorf("a round was asked for %d times when targets only left; want none", soon)
	}
	now = now.Add(2*time.Minute + time.Second)
	for _, k := range keys {
		if got, want := e.shard.owns(k), shard.Owner(two, k) == "phe-0"; got != want {
			t.Errorf("two intervals after the change, owns(%s) = %v, want %v", k, got, want)
		}
	}

	e.SetMembers([]string{"phe-0"})
	if got := testutil.ToFloat64(e.shard.handovers.WithLabelValues("in")); int(got) != len(leaving) {
		t.Errorf("handovers in %v after phe-1 left, want %d", got, len(leaving))
	}
	if soon != 1 {
		t.Errorf("a round was asked for %d times when phe-1's targets came here; want once, at once", soon)
	}
	for _, k := range keys {
		if !e.shard.owns(k) {
			t.Errorf("alone again, phe-0 does not own %s", k)
		}
	}
}

// A replica that has not read the members yet (the API server unreachable at its start) owns
// nothing, checks nothing and is not ready, saying why; it is not alone with the whole fleet.
func TestShardedReplicaWithoutMembersOwnsNothing(t *testing.T) {
	e, err := New(shardedProviders(t), time.Minute, 5*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	joined := false
	e.EnableSharding("phe-0", nil, func() bool { return joined })
	for i := 1; i <= 8; i++ {
		if k := fmt.Sprintf("lab/hv%d", i); e.shard.owns(k) {
			t.Errorf("owns %s before it read the members", k)
		}
	}
	if e.shard.owns("cluster") {
		t.Error("owns the provider owned whole before it read the members")
	}
	runOneRound(t, e)
	for _, p := range e.runner.Current().Providers {
		if len(p.Targets) != 0 {
			t.Errorf("%s: checked %d targets before reading the members", p.Name, len(p.Targets))
		}
	}
	if why := e.notReady(time.Now()); !strings.Contains(why, "members of the shard could not be read") {
		t.Errorf("not ready because %q, want it to say the members could not be read", why)
	}
	soon := 0
	e.shard.runSoon = func() { soon++ }
	joined = true
	e.SetMembers([]string{"phe-0"})
	if !e.shard.owns("lab/hv1") || soon != 1 {
		t.Errorf("after joining alone: owns hv1 %v, rounds asked %d; want it owned and one round at once", e.shard.owns("lab/hv1"), soon)
	}
	if why := e.notReady(time.Now()); strings.Contains(why, "members") {
		t.Errorf("still not ready after joining: %q", why)
	}
}

// A replica whose rounds stopped starting for two intervals plus the timeout reports itself
// wedged (membership then releases its Lease); a fresh round clears it.
func TestShardWorking(t *testing.T) {
	e, err := New(shardedProviders(t), time.Minute, 5*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.ShardWorking(); err != nil {
		t.Errorf("before any round: %v, want none (starting)", err)
	}
	e.roundStarted.Store(time.Now().Add(-(2*time.Minute + 5*time.Second + time.Second)).UnixNano())
	if err := e.ShardWorking(); err == nil || !strings.Contains(err.Error(), "no round of checks has started") {
		t.Errorf("rounds stalled: %v, want an error saying so", err)
	}
	e.roundStarted.Store(time.Now().UnixNano())
	if err := e.ShardWorking(); err != nil {
		t.Errorf("after a round started: %v", err)
	}
}
