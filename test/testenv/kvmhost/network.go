package kvmhost

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Every fleet gets a /24 of 198.18.0.0/15 (reserved for benchmarking, RFC 2544, so no real network
// is ever addressed), and every host a /30 of it: .4i+1 on the test's side of the veth pair,
// .4i+2 inside the host.
const (
	subnets         = 512 // /24s in 198.18.0.0/15
	maxHostsPerNet  = 64  // /30s in a /24
	vethPrefix      = "phk"
	hostIfName      = "eth0"
	allocLockName   = "phe-kvm-subnet.lock"
	benchmarkPrefix = "198.18.0.0/15"
)

var benchmarkNet = netip.MustParsePrefix(benchmarkPrefix)

// vethSeqs bounds the sequence part of a veth name to four base-36 digits, so that with the
// largest PID Linux allows (4194304, seven digits) the name fits in IFNAMSIZ-1 = 15 bytes:
// "phk" + pid + "-" + seq. A process reuses a name only after 1679616 hosts, long after the
// earlier one's fleet has ended.
const vethSeqs = 36 * 36 * 36 * 36

// vethName is the name of the test-side end of the veth pair of host number seq of the test
// process pid; Leftovers reads the pid back from it (ownerFromVeth).
func vethName(pid int, seq uint64) string {
	return vethPrefix + strconv.Itoa(pid) + "-" + strconv.FormatUint(seq%vethSeqs, 36)
}

func subnetBase(k int) netip.Addr {
	b := benchmarkNet.Addr().As4()
	b[1] += byte(k / 256)
	b[2] = byte(k % 256)
	return netip.AddrFrom4(b)
}

// hostAddrs returns the test-side and host-side addresses of host i of subnet k.
func hostAddrs(k, i int) (outside, inside netip.Addr) {
	b := subnetBase(k).As4()
	b[3] = byte(4*i + 1)
	outside = netip.AddrFrom4(b)
	b[3] = byte(4*i + 2)
	inside = netip.AddrFrom4(b)
	return outside, inside
}

// usedSubnets lists the /24s of 198.18.0.0/15 that an interface of this namespace already has an
// address in: those of running fleets of every test process on the machine.
func usedSubnets() (map[int]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !benchmarkNet.Contains(ip) {
			continue
		}
		b := ip.As4()
		used[int(b[1]-18)*256+int(b[2])] = true
	}
	return used, nil
}

// lockDir holds the subnet lock. It is a fixed directory, not os.TempDir(): the lock is
// machine-wide, and test processes may run with TMPDIR set to directories of their own.
const lockDir = "/tmp"

// lockSubnets takes a machine-wide lock so that two test processes never pick the same subnet
// between looking at the addresses in use and adding theirs. The kernel drops the lock if the
// process dies.
func lockSubnets() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(lockDir, allocLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open subnet lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("take subnet lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// setupLinks picks a free subnet and connects every host's namespace to this one with a veth
// pair, the test's end addressed and up.
func setupLinks(ctx context.Context, hosts []*Host) error {
	unlock, err := lockSubnets()
	if err != nil {
		return err
	}
	defer unlock()
	used, err := usedSubnets()
	if err != nil {
		return err
	}
	k := -1
	// Start from the PID so that concurrent test processes rarely even compete for a subnet.
	for j := range subnets {
		if c := (os.Getpid() + j) % subnets; !used[c] {
			k = c
			break
		}
	}
	if k < 0 {
		return fmt.Errorf("every /24 of %s is in use", benchmarkPrefix)
	}
	var batch strings.Builder
	for i, h := range hosts {
		outside, inside := hostAddrs(k, i)
		h.outside, h.inside = outside, inside
		fmt.Fprintf(&batch, "link add %s type veth peer name %s netns %d\n", h.veth, hostIfName, h.holder.PID())
		fmt.Fprintf(&batch, "addr add %s/30 dev %s\n", outside, h.veth)
		fmt.Fprintf(&batch, "link set %s up\n", h.veth)
	}
	if _, err := run(ctx, batch.String(), "ip", "-batch", "-"); err != nil {
		return fmt.Errorf("create veth pairs: %w", err)
	}
	return nil
}

// setupInside addresses the host's end of its veth pair and brings up its interfaces.
//
// It also makes the host give up on orphaned TCP connections after one retransmission: a
// connection whose sshd was killed while the host drops packets (MakeUnreachable) otherwise
// retransmits its FIN for minutes, and that socket keeps the dead host's network namespace, and
// its veth pair, alive meanwhile.
func (h *Host) setupInside(ctx context.Context) error {
	batch := fmt.Sprintf("addr add %s/30 dev %s\nlink set %s up\nlink set lo up\n", h.inside, hostIfName, hostIfName)
	script := "ip -batch - && echo 1 > /proc/sys/net/ipv4/tcp_orphan_retries"
	if _, err := run(ctx, batch, "nsenter", h.nsenterArgs(false, "sh", "-c", script)...); err != nil {
		return fmt.Errorf("configure host network: %w", err)
	}
	return nil
}

// deleteVeth removes the test's end of the pair, which removes both ends. The kernel would do it
// once the host's namespace is gone, but asynchronously; deleting it here makes the cleanup
// observable as soon as it returns.
func deleteVeth(ctx context.Context, name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // already gone with its namespace
	}
	if _, err := run(ctx, "", "ip", "link", "del", name); err != nil {
		if _, gone := net.InterfaceByName(name); gone != nil {
			return nil
		}
		return fmt.Errorf("delete veth %s: %w", name, err)
	}
	return nil
}
