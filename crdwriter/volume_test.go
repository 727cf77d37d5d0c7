package crdwriter

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
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
	case checks.ReasonSSHHandshakeFailed:
		return fmt.Sprintf("dial %s: SSH handshake: ssh: handshake failed: read tcp 198.18.255.1:%d->%s: read: connection reset by peer", addr, 40000+i, addr)
	default:
		return fmt.Sprintf("dial %s: TCP connect: dial tcp %s: connect: connection refused", addr, addr)
	}
}

// fleetRound is round r of the fleet: provider p's hosts (i+fleetShift×r) mod fleetTargets <
// fleetDown are down with reason down, the others ready; since is when each last flipped.
func fleetRound(r int, down checks.Reason, since time.Time) []checks.ProviderState {
	out := make([]checks.ProviderState, fleetProviders)
	for p := range fleetProviders {
		ts := make([]checks.TargetState, fleetTargets)
		for i := range fleetTargets {
			reason := checks.ReasonReady
			if (i+fleetShift*r)%fleetTargets < fleetDown {
				reason = down
			}
			ts[i] = target(fmt.Sprintf("hv%04d.lab.example", i), reason, kvmMessage(i, reason), since)
		}
		out[p] = provider(fmt.Sprintf("kvm-%03d", p), checks.TypeKVM, ts...)
	}
	return out
}

// BenchmarkFleetWriteVolume renders the statuses of 100 providers × 1,000 targets, 1% of the
// targets flipping every round, and reports the bytes of the PUT …/status bodies a round sends
// (every object has a flip, so every object is written) and their size: one iteration is one
// round. The object's metadata is the writer's (labels, annotation, resourceVersion, UID); the
// API server also returns managedFields, a few hundred bytes more.
func BenchmarkFleetWriteVolume(b *testing.B) {
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
		snap := fleetRound(round, checks.ReasonTCPUnreachable, since)
		round++
		now := time.Now()
		for p := range snap {
			m := mems[p]
			before := m.render()
			m.observe(&snap[p], now, time.Hour)
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
