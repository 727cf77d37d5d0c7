package kvm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
)

// scaleRound runs one round under the exporter's default timeout and reports what the goal is
// about: when the last healthy host's verdict was written (healthy-ready-s), and how many
// healthy hosts were not Ready (must be 0).
func scaleRound(c *Checker, healthy map[string]bool) (lastHealthy time.Duration, notReady int, took time.Duration) {
	lastHealthy, why, took := scaleRoundWhy(c, healthy)
	for _, n := range why {
		notReady += n
	}
	return lastHealthy, notReady, took
}

// scaleRoundWhy is scaleRound that also says why healthy hosts were not Ready: a message of
// each, counted.
func scaleRoundWhy(c *Checker, healthy map[string]bool) (lastHealthy time.Duration, why map[string]int, took time.Duration) {
	why = map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	rs := c.Check(ctx)
	took = time.Since(start)
	for _, r := range rs {
		if !healthy[r.Target] {
			continue
		}
		if r.Reason != checks.ReasonReady {
			why[string(r.Reason)+": "+r.Message]++
		}
		if d := r.CheckedAt.Sub(start); d > lastHealthy {
			lastHealthy = d
		}
	}
	return lastHealthy, why, took
}

// BenchmarkScaleStandIn measures rounds at 100 and 500 hosts with 10% of them dead (half
// accept TCP and never speak, half drop SYNs) on the scale stand-in (in-process SSH + libvirt
// RPC servers on loopback: their CPU is in this process too), with the default stage bounds and
// the default timeout (15s), at concurrency 16, 32 (the default) and 64:
//   - cold: a new checker, every host dialled; the dead ones cost their full stage bound;
//   - warm: pooled links; every dead host is dialled again, as in every round.
//
// Reported per round: wall time (ns/op), when the last healthy verdict was written
// (healthy-ready-s), healthy hosts not Ready (healthy-not-ready, the goal is 0) and SSH
// handshakes (handshakes/op).
func BenchmarkScaleStandIn(b *testing.B) {
	for _, n := range []int{100, 500} {
		dead := n / 10
		f := kvmstandin.Start(b, kvmstandin.Counts{Healthy: n - dead, Silent: dead / 2, Dropping: dead - dead/2})
		healthy := map[string]bool{}
		for _, h := range f.Hosts {
			healthy[h.Name] = h.Mode == kvmstandin.Healthy
		}
		k := fleetConfig(f.KVMConfig())
		rand.New(rand.NewPCG(uint64(n), 1)).Shuffle(len(k.Hosts), func(i, j int) { k.Hosts[i], k.Hosts[j] = k.Hosts[j], k.Hosts[i] })
		// 32 is the default, chosen from these figures (docs/benchmarks.md); 16 was the default
		// before them.
		for _, conc := range []int{16, DefaultConcurrency, 64} {
			k := k
			k.Concurrency = conc
			p := config.Provider{Name: fmt.Sprintf("scale-%d-%d", n, conc), Type: "kvm", Block: &k}
			tuning := tuning{}
			report := func(b *testing.B, rounds int, last time.Duration, notReady int, hs int64) {
				b.ReportMetric(last.Seconds()/float64(rounds), "healthy-ready-s")
				b.ReportMetric(float64(notReady)/float64(rounds), "healthy-not-ready")
				b.ReportMetric(float64(hs)/float64(rounds), "handshakes/op")
			}
			b.Run(fmt.Sprintf("hosts=%d/concurrency=%d/cold", n, conc), func(b *testing.B) {
				var last time.Duration
				var notReady int
				hs := f.Authentications()
				for b.Loop() {
					c, err := newTuned(p, nil, tuning)
					if err != nil {
						b.Fatal(err)
					}
					l, nr, _ := scaleRound(c, healthy)
					last, notReady = last+l, notReady+nr
					b.StopTimer()
					c.Close()
					b.StartTimer()
				}
				report(b, b.N, last, notReady, f.Authentications()-hs)
			})
			b.Run(fmt.Sprintf("hosts=%d/concurrency=%d/warm", n, conc), func(b *testing.B) {
				c, err := newTuned(p, nil, tuning)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				scaleRound(c, healthy)
				hs0 := f.Authentications()
				var last time.Duration
				var notReady int
				b.ResetTimer()
				for b.Loop() {
					l, nr, _ := scaleRound(c, healthy)
					last, notReady = last+l, notReady+nr
				}
				report(b, b.N, last, notReady, f.Authentications()-hs0)
			})
		}
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(b *testing.B) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatal(err)
	}
	return len(ents)
}

// BenchmarkPooledHostCost measures what one pooled host costs the exporter, on real hosts
// (sshd + libvirtd in their own namespaces and processes, so every goroutine, byte and file
// descriptor counted here is the exporter's): goroutines, heap bytes and file descriptors per
// host with a live link, after two rounds. Deltas of stack and resident bytes within one
// long-lived process mostly measure memory reused from before; BenchmarkScaleLatency reports
// the resident set of 1,000 and 5,000 links instead.
func BenchmarkPooledHostCost(b *testing.B) {
	const n = 20
	f := kvmhost.Start(b, n)
	p := provider("bench-cost", f, f.Hosts)
	p.Block.(*Config).Concurrency = n
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		g0, fd0 := runtime.NumGoroutine(), openFDs(b)
		b.StartTimer()
		// The pool's keepalive runs every hour here: no keepalive is in flight when counting.
		c, err := newTuned(p, nil, tuning{KeepaliveInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		benchRound(b, c)
		benchRound(b, c)
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/host")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/n, "heap-bytes/host")
		b.ReportMetric(float64(openFDs(b)-fd0)/n, "fds/host")
		c.Close()
		b.StartTimer()
	}
}
