package kvm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
)

// benchInts reads a list of whole numbers from env, def when unset: PHE_BENCH_HOSTS="1000,5000",
// PHE_BENCH_RTT_MS="0,50" and PHE_BENCH_CONCURRENCY="32,256" choose the matrix of
// BenchmarkScaleLatency (0 is allowed: a round trip of 0).
func benchInts(b *testing.B, env string, def []int) []int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			b.Fatalf("%s=%q: want positive whole numbers (0 or more) separated by commas", env, v)
		}
		out = append(out, n)
	}
	return out
}

type procStats struct {
	rss, heap, stacks float64
	goroutines        int
	fds               int
}

// stats reads the process's resident set, its heap in use and its goroutine stacks (after a
// GC), goroutines and descriptors.
func stats(b *testing.B) procStats {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return procStats{rss: rssBytes(b), heap: float64(m.HeapInuse), stacks: float64(m.StackInuse),
		goroutines: runtime.NumGoroutine(), fds: openFDs(b)}
}

// rssBytes is this process's resident set (VmRSS).
func rssBytes(b *testing.B) float64 {
	s, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkScaleLatency measures rounds of 1,000 and 5,000 stand-in hosts, 10% of them dead
// (half silent, half dropping SYNs), at a round trip of 0 and 50 ms (±5 ms), served by the
// kvmstandin command in a process of its own so that every figure but the host-side counts is
// the exporter's alone. For each fleet, round trip and concurrency: a cold round (a new
// checker, every host dialled) and warm rounds (pooled links), under the default 15s timeout.
//
// Reported per round: wall time (ns/op), when the last healthy verdict was written
// (healthy-ready-s), healthy hosts not Ready (healthy-not-ready, the goal is 0), the
// exporter's CPU (cpu-s), libvirt calls per healthy host (calls/check, counted by the hosts),
// SSH logins (handshakes/op); after the rounds, the links still open: RSS (rss-MiB), heap in use
// and goroutine stacks after a GC (heap-MiB, stack-MiB), goroutines and file descriptors.
// PHE_BENCH_HOSTS and PHE_BENCH_CONCURRENCY narrow or widen the matrix.
func BenchmarkScaleLatency(b *testing.B) {
	for _, n := range benchInts(b, "PHE_BENCH_HOSTS", []int{1000, 5000}) {
		dead := n / 10
		f := kvmstandin.StartProcess(b, kvmstandin.Counts{Healthy: n - dead, Silent: dead / 2, Dropping: dead - dead/2}, 0, 0)
		healthy := map[string]bool{}
		for _, h := range f.Hosts {
			healthy[h.Name] = h.Mode == kvmstandin.Healthy
		}
		k := fleetConfig(f.KVMConfig())
		rand.New(rand.NewPCG(uint64(n), 1)).Shuffle(len(k.Hosts), func(i, j int) { k.Hosts[i], k.Hosts[j] = k.Hosts[j], k.Hosts[i] })
		for _, ms := range benchInts(b, "PHE_BENCH_RTT_MS", []int{0, 50}) {
			rtt := time.Duration(ms) * time.Millisecond
			f.SetRTT(b, rtt, rtt/10)
			for _, conc := range benchInts(b, "PHE_BENCH_CONCURRENCY", []int{DefaultConcurrency, 128}) {
				k := k
				k.Concurrency = conc
				p := config.Provider{Name: fmt.Sprintf("latency-%d-%d", n, conc), Type: "kvm", Block: &k}
				name := fmt.Sprintf("hosts=%d/rtt=%s/concurrency=%d", n, rtt, conc)
				// report writes the figures; rss, goroutines and fds are taken with the links of
				// the last round still open.
				report := func(b *testing.B, rounds int, last time.Duration, notReady int, cpu time.Duration, got kvmstandin.RemoteCounts, ps procStats) {
					r := float64(rounds)
					b.ReportMetric(last.Seconds()/r, "healthy-ready-s")
					b.ReportMetric(float64(notReady)/r, "healthy-not-ready")
					b.ReportMetric(cpu.Seconds()/r, "cpu-s")
					b.ReportMetric(float64(got.RPCs)/r/float64(n-dead), "calls/check")
					b.ReportMetric(float64(got.Authentications)/r, "handshakes/op")
					b.ReportMetric(ps.rss/(1<<20), "rss-MiB")
					b.ReportMetric(ps.heap/(1<<20), "heap-MiB")
					b.ReportMetric(ps.stacks/(1<<20), "stack-MiB")
					b.ReportMetric(float64(ps.goroutines), "goroutines")
					b.ReportMetric(float64(ps.fds), "fds")
				}
				b.Run(name+"/cold", func(b *testing.B) {
					var last, cpu time.Duration
					var notReady int
					var got kvmstandin.RemoteCounts
					var ps procStats
					for b.Loop() {
						c, err := newTuned(p, nil, tuning{})
						if err != nil {
							b.Fatal(err)
						}
						before, c0 := f.Counts(b), cpuTime(b)
						l, nr, _ := scaleRound(c, healthy)
						cpu += cpuTime(b) - c0
						last, notReady = last+l, notReady+nr
						b.StopTimer()
						got = got.Add(f.Counts(b).Sub(before))
						ps = stats(b)
						c.Close()
						b.StartTimer()
					}
					report(b, b.N, last, notReady, cpu, got, ps)
				})
				b.Run(name+"/warm", func(b *testing.B) {
					c, err := newTuned(p, nil, tuning{})
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					// Warm: every healthy host linked (a cold round at a long round trip
					// leaves some undialled at its deadline).
					for range 5 {
						if _, nr, _ := scaleRound(c, healthy); nr == 0 {
							break
						}
					}
					before := f.Counts(b)
					var last, cpu time.Duration
					var notReady int
					b.ResetTimer()
					for b.Loop() {
						c0 := cpuTime(b)
						l, why, _ := scaleRoundWhy(c, healthy)
						cpu += cpuTime(b) - c0
						last = last + l
						for msg, k := range why {
							notReady += k
							b.Logf("%d healthy hosts not Ready: %.300s", k, msg)
						}
					}
					b.StopTimer()
					report(b, b.N, last, notReady, cpu, f.Counts(b).Sub(before), stats(b))
				})
			}
		}
	}
}
