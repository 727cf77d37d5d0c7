package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	vspherecheck "github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

var t0 = time.Unix(1_800_000_000, 0)

// acceptPrometheus is what Prometheus 3 sends by default.
const acceptPrometheus = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
	"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// fullSnapshot exercises every metric the collector can emit.
func fullSnapshot() *checks.Snapshot {
	return &checks.Snapshot{
		Round:          7,
		RoundStarted:   t0,
		RoundDuration:  2500 * time.Millisecond,
		AbandonedTotal: 2,
		Providers: []checks.ProviderState{
			{Name: "kvm-lab", Type: "kvm", Thresholds: checks.Thresholds{Failure: 3, Success: 2}, Targets: []checks.TargetState{
				// Failures pending: up, but its last 2 checks failed.
				{Since: t0, ConsecutiveFailures: 2, Checks: 9, FailedChecks: 2, TargetResult: checks.TargetResult{Target: "hv2", Up: true, Reason: checks.ReasonReady,
					Duration: 12 * time.Millisecond, CheckedAt: t0.Add(500 * time.Millisecond),
					Samples: kvmcheck.PoolSamples("default", 1000, 400, 600)}},
				// Recovery pending: down, but its last check succeeded.
				{Since: t0.Add(-90 * time.Second), ConsecutiveSuccesses: 1, Checks: 9, FailedChecks: 8, TargetResult: checks.TargetResult{Target: "hv1", Up: false, Reason: kvmcheck.ReasonTCPUnreachable,
					Message: "dial tcp 198.18.0.1:22: connection refused", Duration: 3 * time.Millisecond, CheckedAt: t0.Add(time.Second)}},
			}, Unchecked: []checks.UncheckedTarget{
				// Never started since it was listed.
				{Target: "hv3", Listed: t0.Add(-30 * time.Second), Message: "not started: ..."},
				// Contacted, its first checks below the thresholds.
				{Target: "hv4", Listed: t0.Add(-30 * time.Second), Checks: 1, FailedChecks: 1, ConsecutiveFailures: 1, CheckReason: checks.ReasonTimeout, CheckedAt: t0},
			}},
			{Name: "gcp-prod", Type: "gcp", Targets: []checks.TargetState{
				{Since: t0, Checks: 5, TargetResult: checks.TargetResult{Target: "my-project", Up: true, Reason: checks.ReasonReady,
					Duration: 250 * time.Millisecond, CheckedAt: t0.Add(2 * time.Second)}},
			}},
			{Name: "cluster-new", Type: "kubernetes"}, // added by a reload, not checked yet
			{Name: "vcenter", Type: "vsphere", Targets: []checks.TargetState{
				{Since: t0, Checks: 5, TargetResult: checks.TargetResult{Target: "vc.example.com", Up: true, Reason: checks.ReasonReady,
					Duration: 40 * time.Millisecond, CheckedAt: t0.Add(2 * time.Second),
					Samples: append(vspherecheck.DatastoreSamples("DC0", "ds1", 5000, 2000, true), vspherecheck.DatastoreSamples("DC0", "ds2", 0, 0, false)...)}},
				// In maintenance: not up.
				{Since: t0, Checks: 5, TargetResult: checks.TargetResult{Target: "esx1", Up: false, Reason: checks.ReasonMaintenance,
					Duration: 40 * time.Millisecond, CheckedAt: t0.Add(2 * time.Second)}},
			}},
		},
	}
}

const fullExposition = `
# HELP proxy_operator_kvm_storage_pool_allocation_bytes Bytes allocated in the KVM host's storage pool, as read by the last check.
# TYPE proxy_operator_kvm_storage_pool_allocation_bytes gauge
proxy_operator_kvm_storage_pool_allocation_bytes{pool="default",provider="kvm-lab",target="hv2"} 400
# HELP proxy_operator_kvm_storage_pool_available_bytes Bytes available in the KVM host's storage pool, as read by the last check.
# TYPE proxy_operator_kvm_storage_pool_available_bytes gauge
proxy_operator_kvm_storage_pool_available_bytes{pool="default",provider="kvm-lab",target="hv2"} 600
# HELP proxy_operator_kvm_storage_pool_capacity_bytes Capacity of the KVM host's storage pool, as read by the last check.
# TYPE proxy_operator_kvm_storage_pool_capacity_bytes gauge
proxy_operator_kvm_storage_pool_capacity_bytes{pool="default",provider="kvm-lab",target="hv2"} 1000
# HELP proxy_operator_provider_check_duration_seconds How long the last check of the target took.
# TYPE proxy_operator_provider_check_duration_seconds gauge
proxy_operator_provider_check_duration_seconds{provider="gcp-prod",target="my-project"} 0.25
proxy_operator_provider_check_duration_seconds{provider="kvm-lab",target="hv1"} 0.003
proxy_operator_provider_check_duration_seconds{provider="kvm-lab",target="hv2"} 0.012
proxy_operator_provider_check_duration_seconds{provider="vcenter",target="esx1"} 0.04
proxy_operator_provider_check_duration_seconds{provider="vcenter",target="vc.example.com"} 0.04
# HELP proxy_operator_provider_check_round_duration_seconds How long the last completed round of provider checks took.
# TYPE proxy_operator_provider_check_round_duration_seconds gauge
proxy_operator_provider_check_round_duration_seconds 2.5
# HELP proxy_operator_provider_check_rounds_total Rounds of provider checks completed since the exporter started.
# TYPE proxy_operator_provider_check_rounds_total counter
proxy_operator_provider_check_rounds_total 7
# HELP proxy_operator_provider_check_timestamp_seconds When the last check of the target completed (pass or fail), in seconds since the Unix epoch.
# TYPE proxy_operator_provider_check_timestamp_seconds gauge
proxy_operator_provider_check_timestamp_seconds{provider="gcp-prod",target="my-project"} 1.800000002e+09
proxy_operator_provider_check_timestamp_seconds{provider="kvm-lab",target="hv1"} 1.800000001e+09
proxy_operator_provider_check_timestamp_seconds{provider="kvm-lab",target="hv2"} 1.8000000005e+09
proxy_operator_provider_check_timestamp_seconds{provider="vcenter",target="esx1"} 1.800000002e+09
proxy_operator_provider_check_timestamp_seconds{provider="vcenter",target="vc.example.com"} 1.800000002e+09
# HELP proxy_operator_provider_checkers_abandoned_total Checkers that had not returned by a round's deadline and were abandoned (their targets read Timeout).
# TYPE proxy_operator_provider_checkers_abandoned_total counter
proxy_operator_provider_checkers_abandoned_total 2
# HELP proxy_operator_provider_failure_threshold The provider's failureThreshold: consecutive failed checks that turn an up target down.
# TYPE proxy_operator_provider_failure_threshold gauge
proxy_operator_provider_failure_threshold{provider="cluster-new"} 1
proxy_operator_provider_failure_threshold{provider="gcp-prod"} 1
proxy_operator_provider_failure_threshold{provider="kvm-lab"} 3
proxy_operator_provider_failure_threshold{provider="vcenter"} 1
# HELP proxy_operator_provider_info 1 for every configured provider, with its type.
# TYPE proxy_operator_provider_info gauge
proxy_operator_provider_info{provider="cluster-new",type="kubernetes"} 1
proxy_operator_provider_info{provider="gcp-prod",type="gcp"} 1
proxy_operator_provider_info{provider="kvm-lab",type="kvm"} 1
proxy_operator_provider_info{provider="vcenter",type="vsphere"} 1
# HELP proxy_operator_provider_success_threshold The provider's successThreshold: consecutive successful checks that turn a down target up.
# TYPE proxy_operator_provider_success_threshold gauge
proxy_operator_provider_success_threshold{provider="cluster-new"} 1
proxy_operator_provider_success_threshold{provider="gcp-prod"} 1
proxy_operator_provider_success_threshold{provider="kvm-lab"} 2
proxy_operator_provider_success_threshold{provider="vcenter"} 1
# HELP proxy_operator_provider_target_checks_failed_total Checks of the target (as in target_checks_total) whose own result was not Ready, whatever the provider's thresholds published.
# TYPE proxy_operator_provider_target_checks_failed_total counter
proxy_operator_provider_target_checks_failed_total{provider="gcp-prod",target="my-project"} 0
proxy_operator_provider_target_checks_failed_total{provider="kvm-lab",target="hv1"} 8
proxy_operator_provider_target_checks_failed_total{provider="kvm-lab",target="hv2"} 2
proxy_operator_provider_target_checks_failed_total{provider="kvm-lab",target="hv3"} 0
proxy_operator_provider_target_checks_failed_total{provider="kvm-lab",target="hv4"} 1
proxy_operator_provider_target_checks_failed_total{provider="vcenter",target="esx1"} 0
proxy_operator_provider_target_checks_failed_total{provider="vcenter",target="vc.example.com"} 0
# HELP proxy_operator_provider_target_checks_total Checks of the target since the exporter listed it: rounds that started its check, and rounds that found an earlier call to it still outstanding (a continuing Timeout); rounds that did not start it are not counted.
# TYPE proxy_operator_provider_target_checks_total counter
proxy_operator_provider_target_checks_total{provider="gcp-prod",target="my-project"} 5
proxy_operator_provider_target_checks_total{provider="kvm-lab",target="hv1"} 9
proxy_operator_provider_target_checks_total{provider="kvm-lab",target="hv2"} 9
proxy_operator_provider_target_checks_total{provider="kvm-lab",target="hv3"} 0
proxy_operator_provider_target_checks_total{provider="kvm-lab",target="hv4"} 1
proxy_operator_provider_target_checks_total{provider="vcenter",target="esx1"} 5
proxy_operator_provider_target_checks_total{provider="vcenter",target="vc.example.com"} 5
# HELP proxy_operator_provider_target_consecutive_failures Checks of the target that failed in a row up to the last one, before the provider's failureThreshold (0 when the last check succeeded). Above 0 while target_up is 1: failures pending.
# TYPE proxy_operator_provider_target_consecutive_failures gauge
proxy_operator_provider_target_consecutive_failures{provider="gcp-prod",target="my-project"} 0
proxy_operator_provider_target_consecutive_failures{provider="kvm-lab",target="hv1"} 0
proxy_operator_provider_target_consecutive_failures{provider="kvm-lab",target="hv2"} 2
proxy_operator_provider_target_consecutive_failures{provider="vcenter",target="esx1"} 0
proxy_operator_provider_target_consecutive_failures{provider="vcenter",target="vc.example.com"} 0
# HELP proxy_operator_provider_target_consecutive_successes Checks of the target that succeeded in a row up to the last one, before the provider's successThreshold (0 when the last check failed). Above 0 while target_up is 0: recovery pending.
# TYPE proxy_operator_provider_target_consecutive_successes gauge
proxy_operator_provider_target_consecutive_successes{provider="gcp-prod",target="my-project"} 0
proxy_operator_provider_target_consecutive_successes{provider="kvm-lab",target="hv1"} 1
proxy_operator_provider_target_consecutive_successes{provider="kvm-lab",target="hv2"} 0
proxy_operator_provider_target_consecutive_successes{provider="vcenter",target="esx1"} 0
proxy_operator_provider_target_consecutive_successes{provider="vcenter",target="vc.example.com"} 0
# HELP proxy_operator_provider_target_last_transition_timestamp_seconds When the verdict on the target last flipped between up and down (a new reason while down is no flip), in seconds since the Unix epoch; before the first flip this process saw, its first check of the target.
# TYPE proxy_operator_provider_target_last_transition_timestamp_seconds gauge
proxy_operator_provider_target_last_transition_timestamp_seconds{provider="gcp-prod",target="my-project"} 1.8e+09
proxy_operator_provider_target_last_transition_timestamp_seconds{provider="kvm-lab",target="hv1"} 1.79999991e+09
proxy_operator_provider_target_last_transition_timestamp_seconds{provider="kvm-lab",target="hv2"} 1.8e+09
proxy_operator_provider_target_last_transition_timestamp_seconds{provider="vcenter",target="esx1"} 1.8e+09
proxy_operator_provider_target_last_transition_timestamp_seconds{provider="vcenter",target="vc.example.com"} 1.8e+09
# HELP proxy_operator_provider_target_reason 1 for the reason of the last verdict on the target (Ready when up); other reasons have no series.
# TYPE proxy_operator_provider_target_reason gauge
proxy_operator_provider_target_reason{provider="gcp-prod",reason="Ready",target="my-project"} 1
proxy_operator_provider_target_reason{provider="kvm-lab",reason="Ready",target="hv2"} 1
proxy_operator_provider_target_reason{provider="kvm-lab",reason="TCPUnreachable",target="hv1"} 1
proxy_operator_provider_target_reason{provider="vcenter",reason="Maintenance",target="esx1"} 1
proxy_operator_provider_target_reason{provider="vcenter",reason="Ready",target="vc.example.com"} 1
# HELP proxy_operator_provider_target_unchecked_since_timestamp_seconds For a target without a verdict yet, when the exporter listed it (its start, or the reload that added it), in seconds since the Unix epoch; no series once it has a verdict.
# TYPE proxy_operator_provider_target_unchecked_since_timestamp_seconds gauge
proxy_operator_provider_target_unchecked_since_timestamp_seconds{provider="kvm-lab",target="hv3"} 1.79999997e+09
proxy_operator_provider_target_unchecked_since_timestamp_seconds{provider="kvm-lab",target="hv4"} 1.79999997e+09
# HELP proxy_operator_provider_target_up 1 when the verdict on the target is Ready, 0 otherwise (the last check's, unless the provider's failureThreshold or successThreshold holds the one before).
# TYPE proxy_operator_provider_target_up gauge
proxy_operator_provider_target_up{provider="gcp-prod",target="my-project"} 1
proxy_operator_provider_target_up{provider="kvm-lab",target="hv1"} 0
proxy_operator_provider_target_up{provider="kvm-lab",target="hv2"} 1
proxy_operator_provider_target_up{provider="vcenter",target="esx1"} 0
proxy_operator_provider_target_up{provider="vcenter",target="vc.example.com"} 1
# HELP proxy_operator_provider_targets_unchecked Targets of the provider without a verdict yet: no round has started their check since they were listed, or their first checks have not met a threshold. They have no target_up series.
# TYPE proxy_operator_provider_targets_unchecked gauge
proxy_operator_provider_targets_unchecked{provider="cluster-new"} 0
proxy_operator_provider_targets_unchecked{provider="gcp-prod"} 0
proxy_operator_provider_targets_unchecked{provider="kvm-lab"} 2
proxy_operator_provider_targets_unchecked{provider="vcenter"} 0
# HELP proxy_operator_vsphere_datastore_accessible Whether the vSphere datastore is accessible (summary.accessible: 1 yes, 0 no), as read by the last check.
# TYPE proxy_operator_vsphere_datastore_accessible gauge
proxy_operator_vsphere_datastore_accessible{datacenter="DC0",datastore="ds1",provider="vcenter",target="vc.example.com"} 1
proxy_operator_vsphere_datastore_accessible{datacenter="DC0",datastore="ds2",provider="vcenter",target="vc.example.com"} 0
# HELP proxy_operator_vsphere_datastore_capacity_bytes Capacity of the vSphere datastore (summary.capacity), as read by the last check.
# TYPE proxy_operator_vsphere_datastore_capacity_bytes gauge
proxy_operator_vsphere_datastore_capacity_bytes{datacenter="DC0",datastore="ds1",provider="vcenter",target="vc.example.com"} 5000
# HELP proxy_operator_vsphere_datastore_free_bytes Free space of the vSphere datastore (summary.freeSpace), as read by the last check.
# TYPE proxy_operator_vsphere_datastore_free_bytes gauge
proxy_operator_vsphere_datastore_free_bytes{datacenter="DC0",datastore="ds1",provider="vcenter",target="vc.example.com"} 2000
`

func fixed(s *checks.Snapshot) func() *checks.Snapshot { return func() *checks.Snapshot { return s } }

func TestCollectFullSnapshot(t *testing.T) {
	if err := testutil.GatherAndCompare(NewGatherer(fixed(fullSnapshot())), strings.NewReader(fullExposition)); err != nil {
		t.Error(err)
	}
}

func TestCollectBeforeFirstRound(t *testing.T) {
	s := &checks.Snapshot{Providers: []checks.ProviderState{{Name: "kvm-lab", Type: "kvm", Thresholds: checks.DefaultThresholds,
		Unchecked: []checks.UncheckedTarget{{Target: "hv1", Listed: t0}}}}}
	// Not checked yet: no verdict (no target_up, no check timestamp), the counters at 0.
	const want = `
# HELP proxy_operator_provider_check_rounds_total Rounds of provider checks completed since the exporter started.
# TYPE proxy_operator_provider_check_rounds_total counter
proxy_operator_provider_check_rounds_total 0
# HELP proxy_operator_provider_checkers_abandoned_total Checkers that had not returned by a round's deadline and were abandoned (their targets read Timeout).
# TYPE proxy_operator_provider_checkers_abandoned_total counter
proxy_operator_provider_checkers_abandoned_total 0
# HELP proxy_operator_provider_failure_threshold The provider's failureThreshold: consecutive failed checks that turn an up target down.
# TYPE proxy_operator_provider_failure_threshold gauge
proxy_operator_provider_failure_threshold{provider="kvm-lab"} 1
# HELP proxy_operator_provider_info 1 for every configured provider, with its type.
# TYPE proxy_operator_provider_info gauge
proxy_operator_provider_info{provider="kvm-lab",type="kvm"} 1
# HELP proxy_operator_provider_success_threshold The provider's successThreshold: consecutive successful checks that turn a down target up.
# TYPE proxy_operator_provider_success_threshold gauge
proxy_operator_provider_success_threshold{provider="kvm-lab"} 1
# HELP proxy_operator_provider_target_checks_failed_total Checks of the target (as in target_checks_total) whose own result was not Ready, whatever the provider's thresholds published.
# TYPE proxy_operator_provider_target_checks_failed_total counter
proxy_operator_provider_target_checks_failed_total{provider="kvm-lab",target="hv1"} 0
# HELP proxy_operator_provider_target_checks_total Checks of the target since the exporter listed it: rounds that started its check, and rounds that found an earlier call to it still outstanding (a continuing Timeout); rounds that did not start it are not counted.
# TYPE proxy_operator_provider_target_checks_total counter
proxy_operator_provider_target_checks_total{provider="kvm-lab",target="hv1"} 0
# HELP proxy_operator_provider_target_unchecked_since_timestamp_seconds For a target without a verdict yet, when the exporter listed it (its start, or the reload that added it), in seconds since the Unix epoch; no series once it has a verdict.
# TYPE proxy_operator_provider_target_unchecked_since_timestamp_seconds gauge
proxy_operator_provider_target_unchecked_since_timestamp_seconds{provider="kvm-lab",target="hv1"} 1.8e+09
# HELP proxy_operator_provider_targets_unchecked Targets of the provider without a verdict yet: no round has started their check since they were listed, or their first checks have not met a threshold. They have no target_up series.
# TYPE proxy_operator_provider_targets_unchecked gauge
proxy_operator_provider_targets_unchecked{provider="kvm-lab"} 1
`
	if err := testutil.GatherAndCompare(NewGatherer(fixed(s)), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestCollectFollowsSnapshotChanges(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	cur.Store(fullSnapshot())
	c := NewGatherer(cur.Load)
	if err := testutil.GatherAndCompare(c, strings.NewReader(fullExposition)); err != nil {
		t.Fatal(err)
	}

	// The next round: hv1 is back with its pool, hv2 changed reason, gcp-prod was removed.
	next := fullSnapshot()
	next.Round = 8
	kvm := &next.Providers[0]
	kvm.Targets[0].Up, kvm.Targets[0].Reason, kvm.Targets[0].Samples = false, kvmcheck.ReasonPoolInactive, nil
	kvm.Targets[1].Up, kvm.Targets[1].Reason = true, checks.ReasonReady
	kvm.Targets[1].Samples = kvmcheck.PoolSamples("default", 10, 1, 9)
	next.Providers = []checks.ProviderState{next.Providers[0], next.Providers[2]}
	cur.Store(next)

	const want = `
# HELP proxy_operator_kvm_storage_pool_capacity_bytes Capacity of the KVM host's storage pool, as read by the last check.
# TYPE proxy_operator_kvm_storage_pool_capacity_bytes gauge
proxy_operator_kvm_storage_pool_capacity_bytes{pool="default",provider="kvm-lab",target="hv1"} 10
# HELP proxy_operator_provider_check_rounds_total Rounds of provider checks completed since the exporter started.
# TYPE proxy_operator_provider_check_rounds_total counter
proxy_operator_provider_check_rounds_total 8
# HELP proxy_operator_provider_info 1 for every configured provider, with its type.
# TYPE proxy_operator_provider_info gauge
proxy_operator_provider_info{provider="cluster-new",type="kubernetes"} 1
proxy_operator_provider_info{provider="kvm-lab",type="kvm"} 1
# HELP proxy_operator_provider_target_reason 1 for the reason of the last verdict on the target (Ready when up); other reasons have no series.
# TYPE proxy_operator_provider_target_reason gauge
proxy_operator_provider_target_reason{provider="kvm-lab",reason="PoolInactive",target="hv2"} 1
proxy_operator_provider_target_reason{provider="kvm-lab",reason="Ready",target="hv1"} 1
# HELP proxy_operator_provider_target_up 1 when the verdict on the target is Ready, 0 otherwise (the last check's, unless the provider's failureThreshold or successThreshold holds the one before).
# TYPE proxy_operator_provider_target_up gauge
proxy_operator_provider_target_up{provider="kvm-lab",target="hv1"} 1
proxy_operator_provider_target_up{provider="kvm-lab",target="hv2"} 0
`
	if err := testutil.GatherAndCompare(c, strings.NewReader(want),
		"proxy_operator_kvm_storage_pool_capacity_bytes", "proxy_operator_provider_check_rounds_total",
		"proxy_operator_provider_info", "proxy_operator_provider_target_reason", "proxy_operator_provider_target_up"); err != nil {
		t.Error(err)
	}

}

func TestInvalidUTF8LabelValueDoesNotFailTheScrape(t *testing.T) {
	s := &checks.Snapshot{Round: 1, Providers: []checks.ProviderState{{Name: "kvm", Type: "kvm",
		Targets: []checks.TargetState{{TargetResult: checks.TargetResult{Target: "hv\xff1", Up: true, Reason: checks.ReasonReady}}}}}}
	// prometheus.Gatherers checks every label value, as the scrape does.
	g := prometheus.Gatherers{NewGatherer(fixed(s))}
	if _, err := g.Gather(); err != nil {
		t.Errorf("scrape failed: %v", err)
	}
	if n, err := testutil.GatherAndCount(g, "proxy_operator_provider_target_up"); err != nil || n != 1 {
		t.Errorf("target_up series: %d, %v; want 1", n, err)
	}
}

// blockedChecker's Check blocks until release is closed, whatever its context says.
type blockedChecker struct {
	started, release chan struct{}
}

func (b *blockedChecker) Name() string              { return "kvm-lab" }
func (b *blockedChecker) Type() checks.ProviderType { return kvmcheck.Type }
func (b *blockedChecker) Targets() []string         { return []string{"hv1"} }
func (b *blockedChecker) Check(context.Context) []checks.TargetResult {
	close(b.started)
	<-b.release
	return []checks.TargetResult{{Target: "hv1", Up: true, Reason: checks.ReasonReady}}
}

func TestScrapeDuringAStuckRoundReturnsAtOnce(t *testing.T) {
	bc := &blockedChecker{started: make(chan struct{}), release: make(chan struct{})}
	r := checks.NewRunner(checks.Options{Interval: time.Hour, Timeout: time.Hour}, []checks.Checker{bc})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	reg := NewGatherer(r.Current)

	<-bc.started
	// The round is now blocked on release, which only this test closes, after the scrape.
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.FirstRound():
		t.Fatal("the round finished before the checker was released")
	default:
	}
	// Rounds total, abandoned total, info, the two thresholds, the unchecked count, and the
	// target's unchecked-since and two counters: no verdict yet.
	if n != 9 {
		t.Errorf("scrape during the first round: %d series, want 9", n)
	}
	if n, err := testutil.GatherAndCount(reg, "proxy_operator_provider_target_up"); err != nil || n != 0 {
		t.Errorf("scrape during the first round: target_up series %d, %v; want none", n, err)
	}

	close(bc.release)
	<-r.FirstRound()
	if n, err := testutil.GatherAndCount(reg, "proxy_operator_provider_target_up"); err != nil || n != 1 {
		t.Errorf("after the round: target_up series %d, %v; want 1", n, err)
	}
}

func TestConcurrentScrapesWhileSnapshotsChange(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	cur.Store(bigSnapshot(100))
	g := prometheus.Gatherers{prometheus.NewRegistry(), NewGatherer(cur.Load)}
	srv := httptest.NewServer(promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError, EnableOpenMetrics: true}))
	defer srv.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := bigSnapshot(100 - i%20)
			s.Round = uint64(i)
			cur.Store(s)
			time.Sleep(time.Millisecond) // a new snapshot every few scrapes, not a busy loop
		}
	})
	// Every encoding Prometheus may ask for reads the shared label pairs and values at once.
	accepts := []string{"text/plain; version=0.0.4", "application/openmetrics-text; version=1.0.0",
		"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"}
	var scrapers sync.WaitGroup
	for _, accept := range accepts {
		scrapers.Go(func() {
			for range 10 {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("Accept", accept)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: status %d", accept, resp.StatusCode)
				}
			}
		})
	}
	scrapers.Wait()
	close(stop)
	wg.Wait()
}

// handler serves s beside a registry as the exporter serves /metrics.
func handler(s *checks.Snapshot) http.Handler {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "proxy_operator_config_last_reload_successful",
		Help: "A family of the registry, before the snapshot's."}))
	return promhttp.HandlerFor(NewGatherer(fixed(s)).With(reg), promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// textOutput is what /metrics serves for s in the text format.
func textOutput(t *testing.T, s *checks.Snapshot) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	handler(s).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := promstack.Promtool(t)
	for name, s := range map[string]*checks.Snapshot{"full": fullSnapshot(), "fleet": bigSnapshot(50)} {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(textOutput(t, s))
		out, err := cmd.CombinedOutput()
		if err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("run promtool: %v", err)
			}
			t.Errorf("%s: promtool check metrics: %v\n%s", name, err, out)
		} else if len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("%s: promtool check metrics reported problems:\n%s", name, out)
		}
	}
}

// TestMetricsDocMatchesCollector keeps docs/metrics.md in step with the collector: the "Provider
// checks" table lists exactly the families the collector can emit, with their types and labels,
// every metric but /probe's carries the prefix, and no metric is documented twice anywhere in the
// file.
func TestMetricsDocMatchesCollector(t *testing.T) {
	type doc struct{ typ, labels string }
	documented := map[string]doc{}
	all := map[string]int{}
	for _, r := range itestutil.MetricsDoc(t) {
		all[r.Name]++
		// /probe answers in the multi-target exporters' own names (probe_success...), as
		// blackbox_exporter does; everything else carries the prefix.
		if !strings.HasPrefix(r.Name, checks.MetricNamespace+"_") && !strings.HasPrefix(r.Section, "/probe") {
			t.Errorf("%s is documented without the %s_ prefix", r.Name, checks.MetricNamespace)
		}
		// A row whose labels are partly described (target_info: "and the target's labels")
		// is not compared here; TestTargetInfoCardinality checks target_info's labels.
		described := slices.ContainsFunc(r.Labels, func(l string) bool { return strings.Contains(l, " ") })
		if r.Section == "Provider checks" && !described {
			documented[r.Name] = doc{r.Type, strings.Join(r.Labels, ", ")}
		}
	}
	for name, n := range all {
		if n > 1 {
			t.Errorf("%s is documented %d times", name, n)
		}
	}

	mfs, err := prometheus.Gatherers{NewGatherer(fixed(fullSnapshot()))}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		emitted[name] = true
		d, ok := documented[name]
		if !ok {
			t.Errorf("%s is emitted but not in the Provider checks table of docs/metrics.md", name)
			continue
		}
		if want := strings.ToLower(mf.GetType().String()); d.typ != want {
			t.Errorf("%s: documented as %s, emitted as %s", name, d.typ, want)
		}
		if want := labelNames(mf.GetMetric()[0]); d.labels != want {
			t.Errorf("%s: documented labels %q, emitted %q", name, d.labels, want)
		}
	}
	for name := range documented {
		if !emitted[name] {
			t.Errorf("%s is documented in the Provider checks table but the collector never emits it", name)
		}
	}
}

// labelNames lists a series' label names in the order the doc uses: provider, target first.
func labelNames(m *dto.Metric) string {
	order := []string{"provider", "target", "type", "reason", "pool", "datacenter", "datastore"}
	var names []string
	for _, lp := range m.GetLabel() {
		names = append(names, lp.GetName())
	}
	slices.SortFunc(names, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	return strings.Join(names, ", ")
}

// TestFormatsAndCompressions: promhttp answers every format and compression Prometheus or a
// person may ask for, each body decoding to the snapshot's series and the registry's.
func TestFormatsAndCompressions(t *testing.T) {
	h := handler(fullSnapshot())
	const series = 78 // fullExposition's 77 and the registry's gauge
	for _, accept := range []string{"", "*/*", "text/plain; version=0.0.4", "text/plain;version=1.0.0;escaping=allow-utf-8",
		"application/openmetrics-text; version=1.0.0", acceptPrometheus,
		"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"} {
		for _, ae := range []string{"", "gzip", "identity", "deflate, gzip, br", "gzip;q=0"} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept", accept)
			req.Header.Set("Accept-Encoding", ae)
			h.ServeHTTP(rec, req)
			what := fmt.Sprintf("Accept %q, Accept-Encoding %q", accept, ae)
			if rec.Code != http.StatusOK {
				t.Errorf("%s: status %d", what, rec.Code)
				continue
			}
			body := io.Reader(rec.Body)
			wantGzip := strings.Contains(ae, "gzip") && !strings.Contains(ae, "q=0")
			if got := rec.Header().Get("Content-Encoding") == "gzip"; got != wantGzip {
				t.Errorf("%s: Content-Encoding %q", what, rec.Header().Get("Content-Encoding"))
			}
			if wantGzip {
				zr, err := gzip.NewReader(body)
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				body = zr
			}
			format := expfmt.ResponseFormat(rec.Header())
			if format.FormatType() == expfmt.TypeOpenMetrics {
				b, err := io.ReadAll(body)
				if err != nil || !bytes.HasSuffix(b, []byte("# EOF\n")) ||
					bytes.Count(b, []byte("\nproxy_operator_")) != series {
					t.Errorf("%s: OpenMetrics body (%v):\n%s", what, err, b)
				}
				continue
			}
			n := 0
			dec := expfmt.NewDecoder(body, format)
			for {
				var mf dto.MetricFamily
				if err := dec.Decode(&mf); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s (%s): %v", what, format, err)
				}
				n += len(mf.GetMetric())
			}
			if n != series {
				t.Errorf("%s (%s): %d series, want %d", what, format, n, series)
			}
		}
	}
}

// TestDuplicateSeriesFailTheScrape: two verdicts on one target (a checker's bug) fail the
// scrape as a registry would, rather than serving inconsistent series.
func TestDuplicateSeriesFailTheScrape(t *testing.T) {
	s := fullSnapshot()
	s.Providers[0].Targets = append(s.Providers[0].Targets, s.Providers[0].Targets[0])
	rec := httptest.NewRecorder()
	handler(s).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "collected before with the same name and label values") {
		t.Errorf("status %d: %s", rec.Code, rec.Body)
	}
}

// TestSnapshotFamiliesPassTheRegistryChecks: the scrape does not check the snapshot's series
// (Gatherer.With), so they must pass every check prometheus.Gatherers runs.
func TestSnapshotFamiliesPassTheRegistryChecks(t *testing.T) {
	s := fullSnapshot()
	s.Providers[0].Targets[0].Target = "hv\xff1" // repaired, not failed
	if _, err := (prometheus.Gatherers{NewGatherer(fixed(s))}).Gather(); err != nil {
		t.Error(err)
	}
}

// TestFamilyInRegistryAndSnapshotFailsTheScrape: a registry family named like a snapshot family
// would be served twice; the scrape fails instead, as prometheus.Gatherers would.
func TestFamilyInRegistryAndSnapshotFailsTheScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: targetUp.name, Help: "A clash."}))
	_, err := NewGatherer(fixed(fullSnapshot())).With(reg).Gather()
	if err == nil || !strings.Contains(err.Error(), targetUp.name) {
		t.Errorf("gather: %v; want an error naming %s", err, targetUp.name)
	}
}

// TestGatherBuildsOncePerSnapshot: scrapes of one snapshot share its families; a new snapshot
// gets new ones.
func TestGatherBuildsOncePerSnapshot(t *testing.T) {
	var cur atomic.Pointer[checks.Snapshot]
	cur.Store(fullSnapshot())
	g := NewGatherer(cur.Load)
	a, _ := g.Gather()
	b, _ := g.Gather()
	if &a[0] != &b[0] {
		t.Error("two scrapes of one snapshot built its families twice")
	}
	cur.Store(fullSnapshot())
	c, _ := g.Gather()
	if &a[0] == &c[0] {
		t.Error("a new snapshot was served from the previous one's families")
	}
}

// TestLabelPairsInNameOrder: prometheus.Gatherers would replace unsorted label pairs of a
// shared series with a sorted copy, a write that concurrent scrapes would race on.
func TestLabelPairsInNameOrder(t *testing.T) {
	mfs, err := NewGatherer(fixed(fullSnapshot())).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if !slices.IsSortedFunc(m.GetLabel(), func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) }) {
				t.Errorf("%s: label pairs %v not in name order", mf.GetName(), m.GetLabel())
			}
		}
	}
}

// TestTargetInfoCardinality: labels add exactly one series per labelled target (target_info),
// and change no other series; a target's own labels win over its provider's.
func TestTargetInfoCardinality(t *testing.T) {
	const n = 5000
	now := time.Now()
	snapOf := func(labelled bool) *checks.Snapshot {
		ps := checks.ProviderState{Name: "kvm-ams", Type: kvmcheck.Type}
		if labelled {
			ps.Labels = checks.Labels{Provider: map[string]string{"site": "ams1", "owner": "platform"}, Targets: map[string]map[string]string{}}
		}
		for i := range n {
			name := fmt.Sprintf("hv%04d", i)
			ps.Targets = append(ps.Targets, checks.TargetState{TargetResult: checks.TargetResult{Target: name, Up: true, Reason: checks.ReasonReady, CheckedAt: now}, Since: now})
			if labelled {
				ps.Labels.Targets[name] = map[string]string{"rack": fmt.Sprintf("r%02d", i%40)}
			}
		}
		if labelled {
			ps.Labels.Targets["hv0001"]["owner"] = "storage"
		}
		return &checks.Snapshot{Round: 1, Providers: []checks.ProviderState{ps}}
	}
	count := func(s *checks.Snapshot) (int, map[string]int) {
		mfs, err := NewGatherer(func() *checks.Snapshot { return s }).Gather()
		if err != nil {
			t.Fatal(err)
		}
		total, by := 0, map[string]int{}
		for _, mf := range mfs {
			total += len(mf.Metric)
			by[mf.GetName()] = len(mf.Metric)
		}
		return total, by
	}
	plain, plainBy := count(snapOf(false))
	labelled, labelledBy := count(snapOf(true))
	if labelled-plain != n || labelledBy["proxy_operator_provider_target_info"] != n || plainBy["proxy_operator_provider_target_info"] != 0 {
		t.Errorf("labels add %d series (%d target_info), want exactly %d target_info series", labelled-plain, labelledBy["proxy_operator_provider_target_info"], n)
	}
	mfs, _ := NewGatherer(func() *checks.Snapshot { return snapOf(true) }).Gather()
	for _, mf := range mfs {
		if mf.GetName() != "proxy_operator_provider_target_info" {
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetName() == "rack" || l.GetName() == "site" {
						t.Fatalf("%s carries the label %s", mf.GetName(), l.GetName())
					}
				}
			}
			continue
		}
		for _, m := range mf.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			if got["target"] == "hv0001" && (got["owner"] != "storage" || got["site"] != "ams1" || got["rack"] != "r01" || got["provider"] != "kvm-ams") {
				t.Errorf("hv0001's target_info %v, want its own owner over the provider's, the site and its rack", got)
			}
		}
	}
}
