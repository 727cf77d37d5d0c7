package exporter

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/collector"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
	"github.com/provider-health-exporter/provider-health-exporter/shard"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// docRow is one metric row of docs/metrics.md.
type docRow struct {
	typ    string
	labels []string
}

// docRows reads the `proxy_operator_*` rows of docs/metrics.md's tables, their labels sorted.
func docRows(t *testing.T) map[string]docRow {
	t.Helper()
	rows := map[string]docRow{}
	for _, r := range testutil.MetricsDoc(t) {
		if !strings.HasPrefix(r.Name, "proxy_operator_") {
			continue
		}
		if _, dup := rows[r.Name]; dup {
			t.Errorf("docs/metrics.md documents %s twice", r.Name)
		}
		labels := slices.Sorted(slices.Values(r.Labels))
		rows[r.Name] = docRow{typ: r.Type, labels: labels}
	}
	return rows
}

// describedNames returns the metric names a collector describes.
func describedNames(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	// Desc keeps its name unexported; its String() is the only way to read it.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names = append(names, m[1])
	}
	return names
}

// TestMetricsDocumented: every proxy_operator_* family the exporter serves has a row in
// docs/metrics.md, with the right type and labels, and every row names a metric the exporter
// serves or registers.
//
// The exporter is built as run() builds it (newExporter, with checks on and one gcp provider)
// and its first round has run; the families are read from its own /metrics handler. What a gcp
// provider cannot make appear is taken from the collectors' descriptions: the KVM storage pool
// series (gathered from a snapshot of a kvm target) and the connection-pool metrics (an open
// kvm pool, described by its collector). The ProviderHealth writer's
// metrics are registered as --crd.enabled registers them: crdwriter.New with the exporter's
// registry (New does not contact the API server).
func TestMetricsDocumented(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2"})
	e, err := New(path, time.Minute, 15*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runnerDone := make(chan struct{})
	go func() {
		defer close(runnerDone)
		e.Runner().Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-runnerDone
		e.Close()
	})
	if _, err := crdwriter.New(crdwriter.Options{
		Config:     &rest.Config{Host: "https://127.0.0.1:1"},
		Source:     e.Runner(),
		Interval:   time.Minute,
		Registerer: e.Registry(),
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Runner().FirstRound():
	case <-time.After(20 * time.Second):
		t.Fatal("the first round did not finish within 20s")
	}
	// Sharded (--shard.enabled) once the round has run, the runner stopped: every metric of
	// sharding is served (the shard, not joined, would own nothing from the next round on),
	// and every target of the round.
	cancel()
	<-runnerDone
	if _, err := shard.New(shard.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "default", Identity: "self", Instance: "main",
		Runner: e.Runner(), Checkers: e.Checkers, Interval: time.Minute, Registerer: e.Registry()}); err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}

	docs := docRows(t)
	served := map[string]bool{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "proxy_operator_") {
			continue
		}
		served[name] = true
		row, ok := docs[name]
		if !ok {
			t.Errorf("%s is served on /metrics but has no row in docs/metrics.md", name)
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != row.typ {
			t.Errorf("%s: docs/metrics.md says %s, /metrics serves a %s", name, row.typ, typ)
		}
		if labels := labelNames(mf); !slices.Equal(labels, row.labels) {
			t.Errorf("%s: docs/metrics.md lists the labels %v, /metrics serves %v", name, row.labels, labels)
		}
	}
	// Families the round above cannot produce: the connection pool's, from the collector the
	// exporter registers, and the snapshot's of a KVM target with its storage pool, of a vCenter
	// with its datastore and of a target without a verdict yet, in a provider with labels.
	described := map[string]bool{}
	for _, name := range slices.Concat(describedNames(t, hostpool.Collector()), describedNames(t, e.inventory)) {
		described[name] = true
		if _, ok := docs[name]; !ok {
			t.Errorf("%s is registered by the exporter but has no row in docs/metrics.md", name)
		}
	}
	kvm := &checks.Snapshot{Round: 1, Providers: []checks.ProviderState{{Name: "kvm", Type: "kvm",
		Targets: []checks.TargetState{{TargetResult: checks.TargetResult{Target: "hv1", Up: true, Reason: checks.ReasonReady,
			Samples: kvm.PoolSamples("default", 0, 0, 0)}}},
		Unchecked: []checks.UncheckedTarget{{Target: "hv2"}}, Labels: checks.Labels{Provider: map[string]string{"site": "ams1"}}},
		{Name: "vc", Type: "vsphere", Targets: []checks.TargetState{{TargetResult: checks.TargetResult{Target: "vc.example.com", Up: true, Reason: checks.ReasonReady,
			Samples: vsphere.DatastoreSamples("DC0", "ds1", 0, 0, true)}}}}}}
	kvmFamilies, err := collector.NewGatherer(func() *checks.Snapshot { return kvm }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range kvmFamilies {
		described[mf.GetName()] = true
		if _, ok := docs[mf.GetName()]; !ok {
			t.Errorf("%s is served for a kvm or vsphere target but has no row in docs/metrics.md", mf.GetName())
		}
	}
	for name := range docs {
		if !served[name] && !described[name] {
			t.Errorf("docs/metrics.md documents %s, which the exporter neither serves nor registers", name)
		}
	}
	// The effective check timing, as newExporter was given it.
	for name, want := range map[string]float64{
		"proxy_operator_provider_check_interval_seconds": 60,
		"proxy_operator_provider_check_timeout_seconds":  15,
	} {
		if mf := mfs[name]; mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != want {
			t.Errorf("%s = %v, want one series of %v", name, mf, want)
		}
	}
	// The checks above could pass on an empty scrape: make sure the round's families are there.
	for _, name := range []string{"proxy_operator_provider_target_up", "proxy_operator_provider_info",
		"proxy_operator_provider_check_rounds_total", "proxy_operator_build_info", "proxy_operator_crd_writer_leader",
		"proxy_operator_provider_check_interval_seconds", "proxy_operator_provider_check_timeout_seconds"} {
		if !served[name] {
			t.Errorf("%s is not served after the first round", name)
		}
	}
}

// labelNames returns the label names used by the series of a family, sorted.
func labelNames(mf *dto.MetricFamily) []string {
	var names []string
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if !slices.Contains(names, lp.GetName()) {
				names = append(names, lp.GetName())
			}
		}
	}
	sort.Strings(names)
	return names
}
