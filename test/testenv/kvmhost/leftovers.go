package kvmhost

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Leftovers reports what this package started that is still on the machine although the test
// process that started it has exited: processes (found by the host directory in their command
// line) and the test-side ends of veth pairs. A veth pair lives as long as the host's network
// namespace, and that as long as any process in it, so a leftover namespace, or a leftover
// process whose command line sshd rewrote, shows as its veth. Empty means nothing leaked.
func Leftovers() ([]string, error) {
	return leftovers(func(owner int) bool { return !alive(owner) })
}

// LeftoversOf reports what the test process pid started and is still on the machine, whether
// that process still runs or not.
func LeftoversOf(pid int) ([]string, error) {
	return leftovers(func(owner int) bool { return owner == pid })
}

func leftovers(match func(owner int) bool) ([]string, error) {
	var out []string
	procs, err := listProcs()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	for _, p := range procs {
		if p.pid == self {
			continue
		}
		if owner, ok := ownerFromMarker(p.cmdline); ok && match(owner) {
			out = append(out, fmt.Sprintf("process %d (owner %d): %s", p.pid, owner, p.cmdline))
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		if owner, ok := ownerFromVeth(ifc.Name); ok && match(owner) {
			out = append(out, fmt.Sprintf("network interface %s (owner %d)", ifc.Name, owner))
		}
	}
	return out, nil
}

// ownerFromMarker finds "phe-kvm-<pid>-" in s and returns the pid.
func ownerFromMarker(s string) (int, bool) {
	for rest := s; ; {
		i := strings.Index(rest, marker)
		if i < 0 {
			return 0, false
		}
		rest = rest[i+len(marker):]
		digits, _, ok := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(digits); ok && err == nil && pid > 0 {
			return pid, true
		}
	}
}

// ownerFromVeth reads the pid from a veth name "phk<pid>-<seq>".
func ownerFromVeth(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, vethPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeStaleDirs removes the directories in tmp of fleets whose test process died without its
// cleanup (killed, or a panic outside the test's goroutine) and that no process uses any more.
func removeStaleDirs(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, marker+"*"))
	var stale []string
	for _, d := range dirs {
		if owner, ok := ownerFromMarker(filepath.Base(d) + "-"); ok && !alive(owner) {
			stale = append(stale, d)
		}
	}
	if len(stale) == 0 {
		return
	}
	procs, err := listProcs()
	if err != nil {
		return
	}
	for _, d := range stale {
		used := false
		for _, p := range procs {
			if strings.Contains(p.cmdline, d) {
				used = true
				break
			}
		}
		if !used {
			_ = os.RemoveAll(d)
		}
	}
}
