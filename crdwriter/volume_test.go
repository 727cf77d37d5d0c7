package crdwriter

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// The write volume of a large fleet, with the messages the KVM checks write (docs/benchmarks.md).

// Fleet sizes of the write volume figures: 100 providers of 1,000 KVM hosts, 10% of them down.
const (
	fleetProviders = 100
	fleetTargets   = 1000
	fleetDown      = 100
	// fleetShift is how far the window of down hosts moves each round: that many hosts come
	// back and as many go down, 2 × fleetShift flips a round (1% of the targets).
	fleetShift = 5
)

// kvmMessage is the message the KVM checks write for host i (checks/kvm, hostpool): the
// libvirt version, host name and pool figures when ready; the dial stage and the error when down.
func kvmMessage(i int, r checks.Reason) string {
	addr := fmt.Sprintf("198.18.%d.%d:22", i/250, i%250+1)
	switch r {
	case checks.ReasonReady:
		return fmt.Sprintf("libvirt 10.0.0 on hv%04d.lab.example; storage pool default running: %.1f TiB available of 3.6 TiB", i, 1+float64(i%20)/10)
	case kvmcheck.ReasonSSHHandshakeFailed:
		return fmt.Sprintf("dial %s: SSH handshake: ssh: handshake failed: read tcp 198.18.255.1:%d->%s: read: connection reset by peer", addr, 40000+i, addr)
	default:
		return fmt.Sprintf("dial %s: TCP connect: dial tcp %s: connect: connection refused", addr, addr)
	}
}

// fleetRound is round r of the fleet: provider p's hosts (i+fleetShift×r) mod fleetTargets <
// fleetDown are down with reason down, the others ready; since is when each last flipped.
func fleetRound(r int, down checks.Reason, since time.Time) []checks.ProviderState {
	return fleetRoundWith(r, down, since, kvmMessage)
}

// pendingMessage is host i's message while a threshold holds its verdict (checks/thresholds.go),
// the longest the checks write in steady operation: a down host whose checks answer Ready
// again ("recovery pending", quoting both the last check and the down message) and a ready host
// whose checks fail ("failures pending", quoting the last check).
func pendingMessage(i int, r checks.Reason) string {
	if r == checks.ReasonReady {
		return fmt.Sprintf("failures pending: 1 of 3 consecutive failed checks (failureThreshold) turn the target down; the last check: %s: %s",
			kvmcheck.ReasonTCPUnreachable, kvmMessage(i, kvmcheck.ReasonTCPUnreachable))
	}
	return fmt.Sprintf("recovery pending: answering Ready, 1 of 2 consecutive successful checks (successThreshold) turn the target up; the last check: %s: %s; down: %s",
		checks.ReasonReady, kvmMessage(i, checks.ReasonReady), kvmMessage(i, r))
}

// capMessage is a message at the CRD's limit (v1alpha1.MaxTargetMessageLength): the bound of an
// object's size whatever the checks write.
func capMessage(int, checks.Reason) string {
	return strings.Repeat("m", v1alpha1.MaxTargetMessageLength)
}

// fleetRoundWith is fleetRound with host i's message msg(i, reason).
func fleetRoundWith(r int, down checks.Reason, since time.Time, msg func(int, checks.Reason) string) []checks.ProviderState {
	out := make([]checks.ProviderState, fleetProviders)
	for p := range fleetProviders {
		ts := make([]checks.TargetState, fleetTargets)
		for i := range fleetTargets {
			reason := checks.ReasonReady
			if (i+fleetShift*r)%fleetTargets < fleetDown {
				reason = down
			}
			ts[i] = target(fmt.Sprintf("hv%04d.lab.example", i), reason, msg(i, reason), since)
		}
		out[p] = provider(fmt.Sprintf("kvm-%03d", p), kvmcheck.Type, ts...)
	}
	return out
}

// BenchmarkFleetWriteVolume renders the statuses of 100 providers × 1,000 targets, 1% of the
// targets flipping every round, and reports the bytes of the PUT …/status bodies a round sends
// (every object has a flip, so every object is written) and their size: one iteration is one
// round. The object's metadata is the writer's (labels, annotation, resourceVersion, UID); the
// API server also returns managedFields, a few hundred bytes more.
//
// Three sets of messages: those the KVM checks write (kvmMessage; the real API server's figure
// is TestAgainstAPIServer/WriteVolumeAtScale), every target's message while a threshold holds
// its verdict (pendingMessage, the longest in steady operation), and every message at the CRD's
// 1,024-byte limit (the bound whatever the checks write).
func BenchmarkFleetWriteVolume(b *testing.B) {
	for _, m := range []struct {
		name string
		msg  func(int, checks.Reason) string
	}{{"messages=checks", kvmMessage}, {"messages=pending", pendingMessage}, {"messages=cap", capMessage}} {
		b.Run(m.name, func(b *testing.B) { benchmarkFleetWriteVolume(b, m.msg) })
	}
}

func benchmarkFleetWriteVolume(b *testing.B, msg func(int, checks.Reason) string) {
	since := time.Now().Add(-time.Hour)
	mems := make([]*providerMem, fleetProviders)
	for p := range mems {
		mems[p] = &providerMem{}
	}
	meta := func(name string) metav1.ObjectMeta {
		m := ownedBy(name, DefaultInstance, "monitoring/"+DefaultInstance)
		m.UID, m.ResourceVersion = "2b6f0e9e-8c4f-4f0e-9a43-1c2d3e4f5a6b", "123456789"
		return m
	}
	round := 0
	observe := func() (bytes, writes int) {
		snap := fleetRoundWith(round, kvmcheck.ReasonTCPUnreachable, since, msg)
		round++
		now := time.Now()
		for p := range snap {
			m := mems[p]
			before := m.render()
			m.observe(&snap[p], 0, now, time.Hour)
			st := m.render()
			if sameVisible(&before, &st) {
				continue
			}
			st.LastHeartbeatTime = &metav1.Time{Time: now.Truncate(time.Second)}
			st.Writer = "exporter-7d9f8b6c5-x2x9q_5f3a9c1e"
			body, err := json.Marshal(&v1alpha1.ProviderHealth{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ProviderHealth"},
				ObjectMeta: meta(snap[p].Name), Status: st})
			if err != nil {
				b.Fatal(err)
			}
			bytes += len(body)
			writes++
		}
		return bytes, writes
	}
	observe() // the first round creates memory
	var bytes, writes int
	for b.Loop() {
		n, w := observe()
		bytes += n
		writes += w
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/round")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/round")
	if writes > 0 {
		b.ReportMetric(float64(bytes)/float64(writes), "bytes/object")
	}
}
