package vsphere_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
)

// Every ESXi host of the datacenter is a target, read by the round's one retrieval: a host
// disconnected, reconnected, put in and taken out of maintenance mode reads so at the next
// round, and the other hosts are unaffected. The session counts the login and one call a
// round.
func TestHosts(t *testing.T) {
	sim := start(t, vcsim.Options{Datacenters: 2})
	cfg := block(sim)
	cfg.Datacenter = "DC1"
	c := newChecker(t, cfg)
	hosts := []string{"DC1_C0_H0", "DC1_C0_H1", "DC1_C0_H2", "DC1_H0"}

	rounds := 0
	// round checks once and wants every host Ready but those of odd, with their reasons.
	round := func(t *testing.T, odd map[string]checks.Reason) {
		t.Helper()
		rounds++
		got := checkAll(t, c, 30*time.Second)
		if r := got[sim.Host()]; r.Reason != checks.ReasonReady || !strings.Contains(r.Message, "4 hosts") {
			t.Errorf("the vCenter's verdict: %s (%s), want Ready with 4 hosts", r.Reason, r.Message)
		}
		if want := append([]string{sim.Host()}, hosts...); !slices.Equal(c.Targets(), want) {
			t.Fatalf("targets %v, want %v (DC0's hosts are not DC1's)", c.Targets(), want)
		}
		for _, h := range hosts {
			want, ok := odd[h]
			if !ok {
				want = checks.ReasonReady
			}
			if r := got[h]; r.Reason != want || r.Up != (want == checks.ReasonReady) || r.NotContacted {
				t.Errorf("host %s: %s (up %v, %q), want %s", h, r.Reason, r.Up, r.Message, want)
			}
		}
	}
	round(t, nil)
	sim.HostTask("DC1_C0_H1", vcsim.Disconnect)
	round(t, map[string]checks.Reason{"DC1_C0_H1": vsphere.ReasonHostDisconnected})
	sim.HostTask("DC1_C0_H1", vcsim.Reconnect)
	round(t, nil)
	sim.HostTask("DC1_H0", vcsim.EnterMaintenance)
	round(t, map[string]checks.Reason{"DC1_H0": checks.ReasonMaintenance})
	// Maintenance comes first: a host disconnected while it is serviced is still in maintenance.
	sim.HostTask("DC1_H0", vcsim.Disconnect)
	round(t, map[string]checks.Reason{"DC1_H0": checks.ReasonMaintenance})
	sim.HostTask("DC1_H0", vcsim.Reconnect)
	sim.HostTask("DC1_H0", vcsim.ExitMaintenance)
	round(t, nil)

	got := sim.SessionsOf(sim.Username())
	if len(got) != 1 || got[0].CallCount != int64(1+rounds) {
		t.Errorf("sessions %+v, want one with %d calls (the login and one RetrievePropertiesEx a round)", got, 1+rounds)
	}

	// A probe of a host makes the round's retrieval and answers that host's verdict.
	sim.HostTask("DC1_C0_H2", vcsim.Disconnect)
	trace := checks.NewTrace()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.ProbeTarget(ctx, "DC1_C0_H2", trace)
	if err != nil || r.Target != "DC1_C0_H2" || r.Reason != vsphere.ReasonHostDisconnected || !strings.Contains(trace.String(), "HostDisconnected") {
		t.Errorf("probe of a disconnected host: %+v, %v\n%s", r, err, trace)
	}
	if _, err := c.ProbeTarget(ctx, "DC0_H0", trace); !errors.Is(err, checks.ErrUnknownTarget) {
		t.Errorf("probe of another datacenter's host: %v, want ErrUnknownTarget", err)
	}
}

// Without a datacenter, the hosts of every datacenter; the vCenter's target carries each
// datastore's gauges, and a round that cannot read the inventory keeps the hosts with the
// vCenter's verdict.
func TestAllDatacentersAndDatastores(t *testing.T) {
	sim := start(t, vcsim.Options{Datacenters: 2})
	c := newChecker(t, block(sim))
	got := checkAll(t, c, 30*time.Second)
	want := []string{sim.Host(), "DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2", "DC0_H0", "DC1_C0_H0", "DC1_C0_H1", "DC1_C0_H2", "DC1_H0"}
	if !slices.Equal(c.Targets(), want) {
		t.Fatalf("targets %v, want %v", c.Targets(), want)
	}
	vc := got[sim.Host()]
	if vc.Reason != checks.ReasonReady || !strings.Contains(vc.Message, "2 datacenters, 8 hosts, 2 datastores") {
		t.Errorf("the vCenter's verdict: %s (%s)", vc.Reason, vc.Message)
	}
	samples := map[string]float64{}
	for _, s := range vc.Samples {
		samples[fmt.Sprintf("%s%q", s.Gauge.Name, s.LabelValues)] = s.Value
	}
	for _, dc := range []string{"DC0", "DC1"} {
		labels := fmt.Sprintf("%q", []string{dc, "LocalDS_0"})
		capacity, free := samples[checks.MetricNamespace+"_vsphere_datastore_capacity_bytes"+labels], samples[checks.MetricNamespace+"_vsphere_datastore_free_bytes"+labels]
		if samples[checks.MetricNamespace+"_vsphere_datastore_accessible"+labels] != 1 || capacity <= 0 || free <= 0 || free > capacity {
			t.Errorf("datastore LocalDS_0 of %s: capacity %v, free %v; samples %v", dc, capacity, free, samples)
		}
	}
	if len(vc.Samples) != 6 {
		t.Errorf("%d samples, want 6 (3 gauges of 2 datastores): %v", len(vc.Samples), samples)
	}
	for _, h := range want[1:] {
		if len(got[h].Samples) != 0 {
			t.Errorf("host %s carries samples %v", h, got[h].Samples)
		}
	}

	sim.Stop()
	got = checkAll(t, c, 30*time.Second)
	if r := got[sim.Host()]; r.Reason != checks.ReasonAPIUnreachable || len(r.Samples) != 0 {
		t.Errorf("the stopped vCenter's verdict: %s (%s), %d samples", r.Reason, r.Message, len(r.Samples))
	}
	for _, h := range want[1:] {
		if r := got[h]; r.Reason != checks.ReasonAPIUnreachable || r.NotContacted || !strings.Contains(r.Message, "state is unknown") {
			t.Errorf("host %s of the stopped vCenter: %s (%q), not contacted %v; want the vCenter's reason, contacted as it was", h, r.Reason, r.Message, r.NotContacted)
		}
	}
}
