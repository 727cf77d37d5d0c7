package kvmhost

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// TCP states as /proc/net/tcp writes them (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// countTCP counts the sockets of the network namespace of pid that are in state and bound to
// localPort. /proc/PID/net/* shows that process's network namespace, so no process is spawned.
func countTCP(pid int, state uint64, localPort uint64) (int, error) {
	n := 0
	for _, file := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", file))
		if err != nil {
			return 0, fmt.Errorf("read sockets: %w", err)
		}
		c, err := parseProcNetTCP(f, state, localPort)
		f.Close()
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// parseProcNetTCP counts the rows of a /proc/net/tcp{,6} table with the given state and local port.
// A row reads: "sl local_address rem_address st ...", addresses as HEXIP:HEXPORT.
func parseProcNetTCP(r io.Reader, state uint64, localPort uint64) (int, error) {
	sc := bufio.NewScanner(r)
	n := 0
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		_, portHex, ok := strings.Cut(fields[1], ":")
		if !ok {
			return 0, fmt.Errorf("unexpected local address %q", fields[1])
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return 0, fmt.Errorf("parse local port %q: %w", portHex, err)
		}
		st, err := strconv.ParseUint(fields[3], 16, 8)
		if err != nil {
			return 0, fmt.Errorf("parse socket state %q: %w", fields[3], err)
		}
		if st == state && port == localPort {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read sockets: %w", err)
	}
	return n, nil
}

// procEntry is what this package needs to know about one process from /proc.
type procEntry struct {
	pid     int
	ppid    int
	state   byte   // R, S, T, Z, ...
	cmdline string // arguments joined by spaces
	pidNS   string // readlink of ns/pid, e.g. "pid:[4026532281]"
}

// listProcs reads every process from /proc. Processes that exit while it reads are skipped.
func listProcs() ([]procEntry, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []procEntry
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(pid)
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func readProc(pid int) (procEntry, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return procEntry{}, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so cut at the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procEntry{}, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return procEntry{}, false
	}
	ppid, _ := strconv.Atoi(fields[1])
	p := procEntry{pid: pid, ppid: ppid, state: fields[0][0]}
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	p.pidNS, _ = os.Readlink(filepath.Join(dir, "ns", "pid"))
	return p, true
}

// procsInPIDNamespace lists the processes whose PID namespace is ns.
func procsInPIDNamespace(ns string) ([]procEntry, error) {
	all, err := listProcs()
	if err != nil {
		return nil, err
	}
	var in []procEntry
	for _, p := range all {
		if p.pidNS == ns {
			in = append(in, p)
		}
	}
	return in, nil
}

// waitExited waits until pid is gone or a zombie.
func waitExited(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p, ok := readProc(pid)
		if !ok || p.state == 'Z' || p.state == 'X' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still running after %s", pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
