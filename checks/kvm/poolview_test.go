package kvm

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// poolView is what the tests see of a checker's connection pool from outside it, as an
// operator would: the pool series hostpool exports for the provider, and the SSH logins the
// hosts' sshd accepted.
type poolView struct {
	// Present is whether the provider has pool series at all: they go with its last pool.
	Present bool
	// Links, AbandonedProbes and Dials are the provider's kvm_pool_connections,
	// kvm_pool_abandoned_probes and kvm_pool_dials_total (by result).
	Links, AbandonedProbes int
	Dials                  map[string]uint64
	// Handshakes counts the SSH logins the hosts accepted: one per new link.
	Handshakes int
}

func viewPool(tb testing.TB, provider string, hosts []*kvmhost.Host) poolView {
	tb.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(hostpool.Collector())
	series := testutil.Series(tb, reg, "provider", provider)
	name := func(n string) string { return prometheus.BuildFQName(checks.MetricNamespace, "kvm_pool", n) }
	v := poolView{
		Present:         len(series) > 0,
		Links:           int(series[name("connections")]),
		AbandonedProbes: int(series[name("abandoned_probes")]),
		Dials:           map[string]uint64{},
		Handshakes:      logins(hosts),
	}
	for key, n := range series {
		if result, ok := strings.CutPrefix(key, name("dials_total")+"{"); ok {
			v.Dials[strings.TrimSuffix(result, "}")] = uint64(n)
		}
	}
	return v
}

// logins counts the SSH logins the hosts' sshd accepted since they started.
func logins(hosts []*kvmhost.Host) int {
	n := 0
	for _, h := range hosts {
		n += h.Logins()
	}
	return n
}
