package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Resources is what the process holds at one moment.
type Resources struct {
	Goroutines int
	FDs        int
	// SSHOnHosts counts the established connections to port 22 as the hosts see them
	// (kvmhost's TCPConnections); SSHFromHere as this process's network namespace sees them.
	SSHOnHosts, SSHFromHere int
	RSS                     uint64 // bytes
}

func (r Resources) String() string {
	return fmt.Sprintf("%d goroutines, %d open fds, %d SSH connections on the hosts (%d from here), RSS %.1f MiB",
		r.Goroutines, r.FDs, r.SSHOnHosts, r.SSHFromHere, float64(r.RSS)/(1<<20))
}

// Tolerances of the leak check: how far above the baseline (taken after the warm-up rounds,
// every target Ready) each measure may end once every fault has cleared and every target
// reads Ready again. SSH connections must come back exactly: one pooled connection per host.
// Goroutines and fds allow for idle HTTP keep-alive connections of the gcp and kubernetes
// clients (one to three goroutines and one fd each, opened and closed by the transports on
// their own schedule); RSS, read after a collection that returns freed memory to the OS,
// allows for what the race detector and the run's own records (pages, object reads) keep.
const (
	tolGoroutines = 16
	tolFDs        = 8
	tolRSS        = 96 << 20
)

// leaks compares now with base and lists what has not come back.
func leaks(base, now Resources) []string {
	var out []string
	if now.Goroutines > base.Goroutines+tolGoroutines {
		out = append(out, fmt.Sprintf("goroutines: %d, baseline %d (tolerance +%d)", now.Goroutines, base.Goroutines, tolGoroutines))
	}
	if now.FDs > base.FDs+tolFDs {
		out = append(out, fmt.Sprintf("open file descriptors: %d, baseline %d (tolerance +%d)", now.FDs, base.FDs, tolFDs))
	}
	if now.SSHOnHosts != base.SSHOnHosts {
		out = append(out, fmt.Sprintf("SSH connections counted on the hosts: %d, baseline %d (%d seen from the exporter's side, baseline %d)",
			now.SSHOnHosts, base.SSHOnHosts, now.SSHFromHere, base.SSHFromHere))
	}
	if now.SSHFromHere != base.SSHFromHere && now.SSHOnHosts == base.SSHOnHosts {
		out = append(out, fmt.Sprintf("SSH connections seen from the exporter's side: %d, baseline %d", now.SSHFromHere, base.SSHFromHere))
	}
	if now.RSS > base.RSS+tolRSS {
		out = append(out, fmt.Sprintf("RSS: %.1f MiB, baseline %.1f MiB (tolerance +%d MiB)", float64(now.RSS)/(1<<20), float64(base.RSS)/(1<<20), tolRSS>>20))
	}
	return out
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // the directory being read
}

func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func goroutines() int { return runtime.NumGoroutine() }

// sshFromHere counts this process's established TCP connections to port 22 of an address in
// 198.18.0.0/15, where the test hosts live. Only sockets this process holds count (matched by
// inode with /proc/self/fd): other processes of the machine (other tests' hosts and exporters)
// share the network namespace.
func sshFromHere() int {
	mine := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "01" || !mine[f[9]] { // ESTABLISHED, ours
			continue
		}
		ip, port, ok := strings.Cut(f[2], ":")
		if !ok || port != "0016" || len(ip) != 8 {
			continue
		}
		v, err := strconv.ParseUint(ip, 16, 32)
		if err != nil {
			continue
		}
		// Little-endian: the first octet is the lowest byte.
		if a, b := byte(v), byte(v>>8); a == 198 && (b == 18 || b == 19) {
			n++
		}
	}
	return n
}
