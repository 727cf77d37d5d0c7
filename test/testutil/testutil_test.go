package testutil

import (
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	if got := len(b.String()); got != 8*len("line 0\n") {
		t.Errorf("%d bytes written, want %d", got, 8*len("line 0\n"))
	}
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Eventually(t, time.Minute, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
}

func TestSeriesSelectsOneLabelValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "up"}, []string{"provider"})
	dials := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dials_total"}, []string{"provider", "result"})
	reg.MustRegister(up, dials)
	up.WithLabelValues("a").Set(1)
	up.WithLabelValues("b").Set(0)
	dials.WithLabelValues("a", "ok").Add(2)
	dials.WithLabelValues("a", "tcp").Add(3)
	dials.WithLabelValues("b", "ok").Add(5)
	want := map[string]float64{"up": 1, "dials_total{ok}": 2, "dials_total{tcp}": 3}
	if got := Series(t, reg, "provider", "a"); !reflect.DeepEqual(got, want) {
		t.Errorf("Series = %v, want %v", got, want)
	}
	if got := Series(t, reg, "provider", "c"); len(got) != 0 {
		t.Errorf("Series of a value nobody has = %v, want none", got)
	}
}

// TestFreeLoopbackAddr: the address is free, on loopback, and outside the ephemeral range, so
// no outgoing connection can be given its port.
func TestFreeLoopbackAddr(t *testing.T) {
	lo, hi := ephemeralRange()
	for range 50 {
		addr := MustFreeLoopbackAddr(t)
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q: host %q, err %v", addr, host, err)
		}
		p, _ := strconv.Atoi(port)
		if p < 1024 || (p >= lo && p <= hi) {
			t.Fatalf("port %d is privileged or in the ephemeral range %d-%d", p, lo, hi)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the picked address is not free: %v", err)
		}
		_ = l.Close()
	}
}

// TestMetricsDocReadsTheTables: docs/metrics.md's rows come with their type, labels and section.
func TestMetricsDocReadsTheTables(t *testing.T) {
	rows := MetricsDoc(t)
	i := slices.IndexFunc(rows, func(r MetricRow) bool { return r.Name == "proxy_operator_provider_target_up" })
	if i < 0 {
		t.Fatalf("no row of proxy_operator_provider_target_up among %d rows", len(rows))
	}
	if r := rows[i]; r.Type != "gauge" || !slices.Equal(r.Labels, []string{"provider", "target"}) || r.Section != "Provider checks" {
		t.Errorf("proxy_operator_provider_target_up: %+v, want a gauge of provider, target in Provider checks", r)
	}
}
