package kvm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// fleetCPU is the CPU time used so far by the processes of the fleet in dir: every process
// whose command line names dir (each host's sshd and libvirtd) and their descendants (sshd's
// per-connection processes), with the CPU of descendants that exited and were reaped.
func fleetCPU(b *testing.B, dir string) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	type proc struct {
		ppid int
		cpu  time.Duration
	}
	procs := map[int]proc{}
	marked := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command name, which may hold spaces, start after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		// utime, stime, and cutime, cstime: the CPU of children it reaped (sshd's connections).
		var ticks int64
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
		procs[pid] = proc{ppid: ppid, cpu: time.Duration(ticks) * clockTick}
		if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(cmd, []byte(dir)) {
			marked[pid] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !marked[pid] && marked[p.ppid] {
				marked[pid], changed = true, true
			}
		}
	}
	var total time.Duration
	for pid := range marked {
		total += procs[pid].cpu
	}
	return total
}

// benchRound runs one round and fails the benchmark unless every host is ready.
func benchRound(b *testing.B, c *Checker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range c.Check(ctx) {
		if r.Reason != checks.ReasonReady {
			b.Fatalf("%s: %s (%s)", r.Target, r.Reason, r.Message)
		}
	}
}

// BenchmarkRound measures one steady-state round of the KVM check over 1, 10 and 50 real hosts
// (sshd + libvirtd each, in network namespaces), side by side with the naive way: a fresh SSH +
// libvirt connection per check, closed after it, as exporters that reconnect per scrape do.
// Reported per round: wall time (ns/op), the process's CPU time per host (cpu-ms/host), and the
// SSH handshakes made (handshakes/op).
func BenchmarkRound(b *testing.B) {
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			start := time.Now()
			f := kvmhost.Start(b, n)
			b.Logf("starting %d hosts took %s", n, time.Since(start).Round(time.Millisecond))
			p := provider(fmt.Sprintf("bench-%d", n), f, f.Hosts)
			p.Block.(*Config).Concurrency = n

			b.Run("pooled", func(b *testing.B) {
				c, err := newTuned(p, nil, tuning{})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				benchRound(b, c) // the first round dials every host
				hs := logins(f.Hosts)
				cpu, hostCPU := cpuTime(b), fleetCPU(b, f.Dir)
				b.ResetTimer()
				for b.Loop() {
					benchRound(b, c)
				}
				b.StopTimer()
				rounds := float64(b.N)
				b.ReportMetric(float64(cpuTime(b)-cpu)/float64(time.Millisecond)/rounds/float64(n), "cpu-ms/host")
				b.ReportMetric(float64(fleetCPU(b, f.Dir)-hostCPU)/float64(time.Millisecond)/rounds/float64(n), "host-cpu-ms/host")
				b.ReportMetric(float64(logins(f.Hosts)-hs)/rounds, "handshakes/op")
			})
			b.Run("naive", func(b *testing.B) {
				hs := logins(f.Hosts)
				cpu, hostCPU := cpuTime(b), fleetCPU(b, f.Dir)
				b.ResetTimer()
				for b.Loop() {
					c, err := newTuned(p, nil, tuning{})
					if err != nil {
						b.Fatal(err)
					}
					benchRound(b, c)
					if err := c.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				rounds := float64(b.N)
				b.ReportMetric(float64(cpuTime(b)-cpu)/float64(time.Millisecond)/rounds/float64(n), "cpu-ms/host")
				b.ReportMetric(float64(fleetCPU(b, f.Dir)-hostCPU)/float64(time.Millisecond)/rounds/float64(n), "host-cpu-ms/host")
				b.ReportMetric(float64(logins(f.Hosts)-hs)/rounds, "handshakes/op")
			})
		})
	}
}

// BenchmarkSteadyCheck measures a steady round over 10 real hosts (sshd + libvirtd each) side by
// side in one run: every check making the four calls of a connection's first check (the check
// before it kept what a connection told), and the check as it is, one call on a connection
// checked before. Reported per check of one host: the libvirt calls the hosts' libvirtd
// dispatched (calls/check, from their logs), the hosts' CPU (host-cpu-ms/check: sshd and
// libvirtd) and the exporter's (cpu-ms/check).
func BenchmarkSteadyCheck(b *testing.B) {
	const n = 10
	f := kvmhost.Start(b, n)
	p := provider("bench-steady", f, f.Hosts)
	p.Block.(*Config).Concurrency = n
	calls := func() int {
		total := 0
		for _, h := range f.Hosts {
			total += h.RPCs()
		}
		return total
	}
	for _, tc := range []struct {
		name    string
		relearn bool
	}{{"four-calls", true}, {"one-call", false}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := newTuned(p, nil, tuning{relearn: tc.relearn})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchRound(b, c) // the first round dials every host
			rpcs, cpu, hostCPU := calls(), cpuTime(b), fleetCPU(b, f.Dir)
			b.ResetTimer()
			for b.Loop() {
				benchRound(b, c)
			}
			b.StopTimer()
			checks := float64(b.N * n)
			b.ReportMetric(float64(calls()-rpcs)/checks, "calls/check")
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(time.Millisecond)/checks, "cpu-ms/check")
			b.ReportMetric(float64(fleetCPU(b, f.Dir)-hostCPU)/float64(time.Millisecond)/checks, "host-cpu-ms/check")
		})
	}
}
