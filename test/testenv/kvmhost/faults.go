package kvmhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// opTimeout bounds one fault operation (a virsh call, a daemon restart).
const opTimeout = 30 * time.Second

func (h *Host) fatal(err error) {
	h.tb.Helper()
	h.tb.Fatalf("kvmhost: %s: %v", h.Name, err)
}

func (h *Host) do(op func(ctx context.Context) error) {
	h.tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := op(ctx); err != nil {
		h.fatal(err)
	}
}

// StopSSHD stops the host's sshd listener (SIGTERM): new connections are refused. Like stopping
// the ssh service on a real host, established connections stay (see KillSSHConnections).
func (h *Host) StopSSHD() {
	h.tb.Helper()
	h.do(func(context.Context) error {
		h.sshd.Stop(syscall.SIGTERM, stopGrace)
		return nil
	})
}

// StartSSHD starts the host's sshd again, if it is stopped, and waits until it listens.
func (h *Host) StartSSHD() {
	h.tb.Helper()
	h.do(func(context.Context) error {
		if !h.sshd.Exited() {
			return nil
		}
		return h.startSSHD()
	})
}

// StopLibvirtd stops the host's libvirtd (SIGTERM, SIGKILL after a grace period): its socket is
// gone, so opening a channel to it fails while SSH keeps working.
func (h *Host) StopLibvirtd() {
	h.tb.Helper()
	h.do(func(context.Context) error {
		h.libvirtd.Stop(syscall.SIGTERM, stopGrace)
		return nil
	})
}

// StartLibvirtd starts the host's libvirtd again, if it is stopped, and waits until it serves;
// the pool is marked for autostart, so it is running again too.
func (h *Host) StartLibvirtd() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		if !h.libvirtd.Exited() {
			return nil
		}
		if err := h.startLibvirtd(); err != nil {
			return err
		}
		// The socket accepts before the drivers are up; an answered call means they are.
		_, err := h.virsh(ctx, "uri")
		return err
	})
}

// PauseLibvirtd freezes the host's libvirtd (SIGSTOP): connections stay open, calls hang.
func (h *Host) PauseLibvirtd() {
	h.tb.Helper()
	h.do(func(context.Context) error { return h.libvirtd.Signal(syscall.SIGSTOP) })
}

// ResumeLibvirtd lets a paused libvirtd run again (SIGCONT); calls made meanwhile complete.
func (h *Host) ResumeLibvirtd() {
	h.tb.Helper()
	h.do(func(context.Context) error { return h.libvirtd.Signal(syscall.SIGCONT) })
}

// DestroyPool stops the host's pool (virsh pool-destroy): it stays defined, inactive.
func (h *Host) DestroyPool() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		_, err := h.virsh(ctx, "pool-destroy", h.Pool)
		return err
	})
}

// StartPool starts the host's pool again (virsh pool-start).
func (h *Host) StartPool() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		_, err := h.virsh(ctx, "pool-start", h.Pool)
		return err
	})
}

// UndefinePool removes the host's pool (stopping it first if it runs): looking it up fails with
// libvirt's "no storage pool" error.
func (h *Host) UndefinePool() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		info, err := h.poolInfo(ctx)
		if err != nil {
			return err
		}
		if info.State != "inactive" {
			if _, err := h.virsh(ctx, "pool-destroy", h.Pool); err != nil {
				return err
			}
		}
		_, err = h.virsh(ctx, "pool-undefine", h.Pool)
		return err
	})
}

// DefinePool defines, starts and marks for autostart the host's pool again after UndefinePool.
func (h *Host) DefinePool() {
	h.tb.Helper()
	h.do(h.definePool)
}

// ReplaceHostKey gives the host new host keys of every type and restarts sshd. known_hosts is
// left alone, so a client that verifies it gets a key mismatch.
func (h *Host) ReplaceHostKey() {
	h.tb.Helper()
	h.do(func(context.Context) error {
		keys, err := writeHostKeys(h.Dir, h.Hostname)
		if err != nil {
			return err
		}
		h.HostKeys = keys
		h.sshd.Stop(syscall.SIGTERM, stopGrace)
		return h.startSSHD()
	})
}

// MakeUnreachable drops every packet that reaches the host (an iptables rule in its network
// namespace): a dial hangs until its deadline instead of being refused, and established
// connections stall.
func (h *Host) MakeUnreachable() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		if h.unreachable {
			return nil
		}
		if err := h.iptables(ctx, "-I"); err != nil {
			return err
		}
		h.unreachable = true
		return nil
	})
}

// MakeReachable removes the rule MakeUnreachable added.
func (h *Host) MakeReachable() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		if !h.unreachable {
			return nil
		}
		if err := h.iptables(ctx, "-D"); err != nil {
			return err
		}
		h.unreachable = false
		return nil
	})
}

func (h *Host) iptables(ctx context.Context, op string) error {
	_, err := run(ctx, "", "nsenter", h.nsenterArgs(false, "iptables", "-w", op, "INPUT", "-i", hostIfName, "-j", "DROP")...)
	return err
}

// KillSSHConnections kills the host's per-connection sshd processes (SIGKILL), as an sshd crash
// or an OOM kill would: the TCP connections close and clients see the end of their connection.
// The listener keeps running.
func (h *Host) KillSSHConnections() {
	h.tb.Helper()
	h.do(func(context.Context) error { return h.killSSHConnections() })
}

// killSSHConnections kills the per-connection sshd processes and waits until they are gone. The
// caller holds h.mu.
func (h *Host) killSSHConnections() error {
	procs, err := procsInPIDNamespace(h.pidNS)
	if err != nil {
		return err
	}
	var killed []int
	for _, p := range procs {
		// PID 1 is the namespace holder; everything else there was forked by sshd.
		if p.pid == h.nsInit {
			continue
		}
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill sshd connection process %d: %w", p.pid, err)
		}
		killed = append(killed, p.pid)
	}
	// Sockets are closed by the time a process is a zombie.
	for _, pid := range killed {
		if err := waitExited(pid, stopGrace); err != nil {
			return fmt.Errorf("kill sshd connection: %w", err)
		}
	}
	return nil
}

// TCPConnections counts the established TCP connections to the host's port 22, as the host sees
// them.
func (h *Host) TCPConnections() int {
	h.tb.Helper()
	n, err := countTCP(h.holder.PID(), tcpEstablished, 22)
	if err != nil {
		h.fatal(err)
	}
	return n
}

// PoolInfo is what virsh pool-info --bytes says about a pool. Sizes are zero for an inactive
// pool, which virsh does not report sizes for.
type PoolInfo struct {
	State      string // "running", "inactive", ...
	Persistent bool
	Autostart  bool
	Capacity   uint64 // bytes
	Allocation uint64 // bytes
	Available  uint64 // bytes
}

// PoolInfo reports the host's pool as virsh sees it: an independent view to compare a libvirt
// client's answers with.
func (h *Host) PoolInfo() PoolInfo {
	h.tb.Helper()
	var info PoolInfo
	h.do(func(ctx context.Context) error {
		var err error
		info, err = h.poolInfo(ctx)
		return err
	})
	return info
}

func (h *Host) poolInfo(ctx context.Context) (PoolInfo, error) {
	out, err := h.virsh(ctx, "pool-info", "--bytes", h.Pool)
	if err != nil {
		return PoolInfo{}, err
	}
	return parsePoolInfo(out)
}

// parsePoolInfo reads virsh pool-info --bytes output: "Key:   value" lines.
func parsePoolInfo(out string) (PoolInfo, error) {
	var info PoolInfo
	seen := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		seen[key] = true
		var err error
		switch key {
		case "State":
			info.State = val
		case "Persistent":
			info.Persistent = val == "yes"
		case "Autostart":
			info.Autostart = val == "yes"
		case "Capacity":
			info.Capacity, err = parseBytes(val)
		case "Allocation":
			info.Allocation, err = parseBytes(val)
		case "Available":
			info.Available, err = parseBytes(val)
		}
		if err != nil {
			return PoolInfo{}, fmt.Errorf("pool-info %s: %w", key, err)
		}
	}
	if !seen["State"] {
		return PoolInfo{}, fmt.Errorf("pool-info without a state: %q", out)
	}
	if info.State == "running" && !seen["Capacity"] {
		return PoolInfo{}, fmt.Errorf("pool-info of a running pool without sizes: %q", out)
	}
	return info, nil
}

// parseBytes reads "123" or "123 bytes".
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(strings.TrimSuffix(s, "bytes"))
	return strconv.ParseUint(s, 10, 64)
}

// Virsh runs virsh against the host's libvirtd and returns its combined output.
func (h *Host) Virsh(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return h.virsh(ctx, args...)
}

// RotateClientKey gives the fleet a new client key, as a Secret rotated in place does: the new
// key is written beside ClientKeyPath and renamed over it, and every host's authorized_keys then
// lists only the new key. SSH connections already open stay logged in.
func (f *Fleet) RotateClientKey() {
	f.tb.Helper()
	key, err := newKey("ed25519")
	if err != nil {
		f.tb.Fatalf("kvmhost: rotate client key: %v", err)
	}
	tmp := f.ClientKeyPath + ".rotated"
	pub, err := writePrivateKey(tmp, key, "kvmhost-client-rotated")
	if err != nil {
		f.tb.Fatalf("kvmhost: rotate client key: %v", err)
	}
	if err := os.Rename(tmp, f.ClientKeyPath); err != nil {
		f.tb.Fatalf("kvmhost: rotate client key: %v", err)
	}
	if err := os.Rename(tmp+".pub", f.ClientKeyPath+".pub"); err != nil {
		f.tb.Fatalf("kvmhost: rotate client key: %v", err)
	}
	for _, h := range f.Hosts {
		if err := os.WriteFile(filepath.Join(h.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(pub), 0o600); err != nil {
			f.tb.Fatalf("kvmhost: %s: write authorized_keys: %v", h.Name, err)
		}
	}
}

// Logins counts the SSH logins the host's sshd accepted since the host started, as its log
// records them ("Accepted publickey"): one per new SSH connection of the exporter.
func (h *Host) Logins() int {
	h.tb.Helper()
	data, err := os.ReadFile(filepath.Join(h.Dir, "sshd.log"))
	if err != nil {
		h.fatal(err)
	}
	return strings.Count(string(data), "Accepted publickey for ")
}

// rpcLog is the file, in the host's directory, where its libvirtd logs each RPC it dispatches.
const rpcLog = "rpc.log"

// RPCs counts the calls of libvirt's remote program (the calls a client makes: the check's,
// not keepalives) that the host's libvirtd dispatched since it first started, read from its log.
func (h *Host) RPCs() int {
	b, err := os.ReadFile(filepath.Join(h.Dir, rpcLog))
	if err != nil {
		h.fatal(fmt.Errorf("read %s: %w", rpcLog, err))
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		// virNetServerProgramDispatch logs "prog=536903814 ver=1 type=0 status=0 serial=… proc=…"
		// for every message; type=0 is a call (replies and streams are other types).
		if strings.Contains(line, "prog=536903814 ") && strings.Contains(line, " type=0 ") {
			n++
		}
	}
	return n
}
