package kvmhost

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// PauseSSHD freezes the host's sshd listener (SIGSTOP): the kernel still completes TCP
// connections to port 22, but nothing ever answers on them, as with a hung sshd. Established
// SSH connections (their own sshd processes) keep working; KillSSHConnections ends them.
func (h *Host) PauseSSHD() {
	h.tb.Helper()
	h.do(func(context.Context) error { return h.sshd.Signal(syscall.SIGSTOP) })
}

// ResumeSSHD lets a paused sshd listener run again (SIGCONT): it serves new connections, and
// the ones that waited meanwhile.
func (h *Host) ResumeSSHD() {
	h.tb.Helper()
	h.do(func(context.Context) error { return h.sshd.Signal(syscall.SIGCONT) })
}

// CountSSHConnections starts counting the TCP connections that reach the host's port 22 (the
// SYNs its kernel receives, in an iptables rule without a target, after any DROP rule, so that
// a dropped SYN is not counted). SSHConnectionsSeen reads the count.
func (h *Host) CountSSHConnections() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		_, err := run(ctx, "", "nsenter", h.nsenterArgs(false, "iptables", "-w", "-A", "INPUT", "-i", hostIfName,
			"-p", "tcp", "--dport", "22", "--syn")...)
		return err
	})
}

// SSHConnectionsSeen is how many TCP connections reached the host's port 22 since
// CountSSHConnections.
func (h *Host) SSHConnectionsSeen() int {
	h.tb.Helper()
	var n int
	h.do(func(ctx context.Context) error {
		out, err := run(ctx, "", "nsenter", h.nsenterArgs(false, "iptables", "-w", "-n", "-v", "-x", "-L", "INPUT")...)
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(out, "\n") {
			if !strings.Contains(line, "dpt:22") || !strings.Contains(line, "flags:0x17/0x02") {
				continue
			}
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			n, err = strconv.Atoi(fields[0])
			return err
		}
		return fmt.Errorf("no connection counting rule in the host's INPUT chain (call CountSSHConnections first):\n%s", out)
	})
	return n
}
