package crdwriter

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	itestutil "github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// harness runs a Writer fed by a fakeSource, against the real API server (objs nil) or against
// fakeObjects with a FakeRecorder for Events. Tests drive it the way main does: they publish
// snapshots, and read what the writer did from the API server and its metrics.
type harness struct {
	t      *testing.T
	w      *Writer
	src    *fakeSource
	rec    *record.FakeRecorder // nil against the real API server
	reg    *prometheus.Registry
	logs   *itestutil.SyncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

func newHarness(t *testing.T, cfg *rest.Config, objs *fakeObjects, src *fakeSource, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, src: src, reg: prometheus.NewRegistry(), logs: &itestutil.SyncBuffer{}}
	if cfg == nil {
		cfg = &rest.Config{Host: "https://127.0.0.1:1"} // never contacted: fakeObjects replace the client
	}
	opts := Options{
		Config:          cfg,
		Logger:          slog.New(slog.NewTextHandler(io.MultiWriter(h.logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Interval:        time.Minute,
		Registerer:      h.reg,
		MaxRetryBackoff: 20 * time.Millisecond,
		// Tests of other things see every reason change at once; the reason interval's own
		// tests set it.
		MinReasonInterval: -1,
	}
	if src != nil {
		opts.Source = src
	}
	if mod != nil {
		mod(&opts)
	}
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if objs != nil {
		w.objects = objs
		h.rec = record.NewFakeRecorder(1000)
		w.newRecorder = func(context.Context, func() bool) (record.EventRecorder, func()) { return h.rec, func() {} }
	}
	h.w = w
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.w.Run(ctx); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}()
	h.t.Cleanup(h.stop)
}

// lead runs one term of the writer with that view of the Lease (as a leader election's
// OnStartedLeading does) until the test ends.
func (h *harness) lead(lease *leaseView) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.w.lead(ctx, lease)
	}()
	h.t.Cleanup(func() { cancel(); <-done })
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

// round publishes a snapshot and waits until the writer has mirrored it (its synced round
// metric).
func (h *harness) round(providers ...checks.ProviderState) {
	h.t.Helper()
	h.src.publish(providers...)
	want := float64(h.src.Current().Round)
	eventually(h.t, "the writer synced the new round", func() bool { return h.metric("crd_writer_synced_round") >= want })
}

// writes is the writer's writes counter of that kind and result.
func (h *harness) writes(kind, result string) float64 {
	return h.metric("crd_writer_writes_total", "kind", kind, "result", result)
}

// metric reads what an operator scrapes: the value of the series of the family
// checks.MetricNamespace_name with exactly these label pairs (name, value, ...), gathered from the
// registry the writer registered its metrics into. A missing series fails the test.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	name = prometheus.BuildFQName(checks.MetricNamespace, "", name)
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	h.t.Fatalf("no series %s%v in the writer's registry", name, labels)
	return 0
}

// testWriter sends the writer's logs to the test log (shown when a test fails or with -v).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// eventually waits up to 10 seconds for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	itestutil.Eventually(t, 10*time.Second, what, cond)
}
