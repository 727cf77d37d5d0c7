package shard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"

	rendezvous "github.com/provider-health-exporter/provider-health-exporter/checks/shard"
	"github.com/provider-health-exporter/provider-health-exporter/exporter"
	// The providers' types, which the exporter's providers file names.
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
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

// newReplica is an exporter of the providers at path, checking every minute, closed at the
// test's end.
func newReplica(t *testing.T, path string) *exporter.Exporter {
	t.Helper()
	e, err := exporter.New(path, time.Minute, 5*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// sharded makes e's runner the replica self of a shard whose members it has read as members
// (nil: it has not read them, not joined), with no API server: the membership is never run.
// reg, when set, registers the shard's metrics.
func sharded(t *testing.T, e *exporter.Exporter, self string, members []string, reg prometheus.Registerer) *Shard {
	t.Helper()
	s, err := New(Options{
		Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "default", Identity: self, Instance: "main",
		Runner: e.Runner(), Checkers: e.Checkers, Interval: time.Minute, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.m.mu.Lock()
	s.m.members, s.m.joined = slices.Clone(members), members != nil
	s.m.mu.Unlock()
	s.members = members
	return s
}

// A sharded replica checks and reports the hosts it owns and the providers owned whole it
// owns; proxy_operator_shard_owned_targets says how many per provider.
func TestShardedReplicaReportsWhatItOwns(t *testing.T) {
	members := []string{"phe-0", "phe-1"}
	var wantHosts []string
	for i := 1; i <= 8; i++ {
		if h := fmt.Sprintf("hv%d", i); rendezvous.Owner(members, "lab/"+h) == "phe-0" {
			wantHosts = append(wantHosts, h)
		}
	}
	ownsCluster := rendezvous.Owner(members, "cluster") == "phe-0"
	if len(wantHosts) == 0 || len(wantHosts) == 8 {
		t.Fatalf("phe-0 owns %v of the eight hosts: the test needs a split", wantHosts)
	}

	e := newReplica(t, shardedProviders(t))
	reg := prometheus.NewRegistry()
	sharded(t, e, "phe-0", members, reg)
	runOneRound(t, e)

	snap := e.Runner().Current()
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
`, helpOf(t, reg, "proxy_operator_shard_owned_targets"), clusterTargets, len(wantHosts))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "proxy_operator_shard_owned_targets"); err != nil {
		t.Error(err)
	}
	// Every replica says how many targets each provider has, owned or not: the mixin's
	// ProviderHealthShardTargetsUnreported compares it with the targets the replicas report.
	configured := fmt.Sprintf(`# HELP proxy_operator_shard_configured_targets %s
# TYPE proxy_operator_shard_configured_targets gauge
proxy_operator_shard_configured_targets{provider="cluster"} 1
proxy_operator_shard_configured_targets{provider="lab"} 8
`, helpOf(t, reg, "proxy_operator_shard_configured_targets"))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(configured), "proxy_operator_shard_configured_targets"); err != nil {
		t.Error(err)
	}
}

func helpOf(t *testing.T, reg prometheus.Gatherer, name string) string {
	mfs, err := reg.Gather()
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
// one that moves here is owned at once; both moves are counted. The replica follows the
// others' parts only while it hands targets over or a writer folds the fleet.
func TestShardHandover(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	now := time.Unix(1_800_000_000, 0)
	s := sharded(t, e, "phe-0", []string{"phe-0"}, nil)
	s.now = func() time.Time { return now }
	soon := 0
	s.runSoon = func() { soon++ }

	var keys []string
	for i := 1; i <= 8; i++ {
		keys = append(keys, fmt.Sprintf("lab/hv%d", i))
	}
	keys = append(keys, "cluster")
	for _, k := range keys {
		if !s.owns(k) {
			t.Fatalf("alone, phe-0 does not own %s", k)
		}
	}
	if s.following() {
		t.Error("phe-0 follows the parts with nothing handed over and no writer")
	}

	two := []string{"phe-0", "phe-1"}
	s.setMembers(two)
	var leaving []string
	for _, k := range keys {
		if rendezvous.Owner(two, k) != "phe-0" {
			leaving = append(leaving, k)
		}
		if !s.owns(k) {
			t.Errorf("%s left phe-0 at once; it must be kept until the new owner has reported it", k)
		}
	}
	if len(leaving) == 0 {
		t.Fatal("nothing moved to phe-1: the test needs a move")
	}
	if got := testutil.ToFloat64(s.handovers.WithLabelValues("out")); int(got) != len(leaving) {
		t.Errorf("handovers out %v, want %d", got, len(leaving))
	}
	if soon != 0 {
		t.Errorf("a round was asked for %d times when targets only left; want none", soon)
	}
	if !s.following() {
		t.Error("phe-0 does not follow the parts while it hands targets over")
	}
	now = now.Add(2*time.Minute + time.Second)
	for _, k := range keys {
		if got, want := s.owns(k), rendezvous.Owner(two, k) == "phe-0"; got != want {
			t.Errorf("two intervals after the change, owns(%s) = %v, want %v", k, got, want)
		}
	}
	if s.following() {
		t.Error("phe-0 still follows the parts once its handover is over")
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Fleet().Subscribe(ctx)
	if !s.following() {
		t.Error("phe-0 does not follow the parts while the writer folds the fleet")
	}
	cancel()
	itestutil.Eventually(t, 10*time.Second, "phe-0 to stop following once the writer left", func() bool { return !s.following() })

	s.setMembers([]string{"phe-0"})
	if got := testutil.ToFloat64(s.handovers.WithLabelValues("in")); int(got) != len(leaving) {
		t.Errorf("handovers in %v after phe-1 left, want %d", got, len(leaving))
	}
	if soon != 1 {
		t.Errorf("a round was asked for %d times when phe-1's targets came here; want once, at once", soon)
	}
	for _, k := range keys {
		if !s.owns(k) {
			t.Errorf("alone again, phe-0 does not own %s", k)
		}
	}
}

// A replica that has not read the members yet (the API server unreachable at its start) owns
// nothing, checks nothing and is not ready, saying why; it is not alone with the whole fleet.
func TestShardedReplicaWithoutMembersOwnsNothing(t *testing.T) {
	e := newReplica(t, shardedProviders(t))
	s := sharded(t, e, "phe-0", nil, nil)
	e.Readiness = s.Ready
	for i := 1; i <= 8; i++ {
		if k := fmt.Sprintf("lab/hv%d", i); s.owns(k) {
			t.Errorf("owns %s before it read the members", k)
		}
	}
	if s.owns("cluster") {
		t.Error("owns the provider owned whole before it read the members")
	}
	runOneRound(t, e)
	for _, p := range e.Runner().Current().Providers {
		if len(p.Targets) != 0 {
			t.Errorf("%s: checked %d targets before reading the members", p.Name, len(p.Targets))
		}
	}
	if code, why := ready(e); code != http.StatusServiceUnavailable || !strings.Contains(why, "members of the shard could not be read") {
		t.Errorf("/-/ready: %d %q, want 503 saying the members could not be read", code, why)
	}
	soon := 0
	s.runSoon = func() { soon++ }
	// Joining alone, as the membership does: joined, then the members told.
	s.m.mu.Lock()
	s.m.members, s.m.joined = []string{"phe-0"}, true
	s.m.mu.Unlock()
	s.setMembers([]string{"phe-0"})
	if !s.owns("lab/hv1") || soon != 1 {
		t.Errorf("after joining alone: owns hv1 %v, rounds asked %d; want it owned and one round at once", s.owns("lab/hv1"), soon)
	}
	if code, why := ready(e); code != http.StatusOK {
		t.Errorf("still not ready after joining: %d %q", code, why)
	}
}

// ready is e's answer to GET /-/ready.
func ready(e *exporter.Exporter) (int, string) {
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/-/ready", nil))
	return rec.Code, rec.Body.String()
}
