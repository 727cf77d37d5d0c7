// Package kvmhost starts KVM hosts for tests: each host is a set of Linux namespaces (network,
// mount, UTS, PID) with its own address from 198.18.0.0/15, running Debian's sshd (key-only
// login, one host key of each of ed25519, ECDSA and RSA) and libvirtd (own socket, state and
// configuration) with a "dir" storage pool. The test reaches the hosts from its own namespace
// through one veth pair per host, exactly as the exporter reaches real hosts: SSH, then libvirt
// over a direct-streamlocal channel to the host's libvirt socket.
//
// Faults are real: a host's daemons are stopped, frozen with SIGSTOP, its pool destroyed or
// undefined, its host keys replaced, its address made to drop packets.
//
// Typical use:
//
//	f := kvmhost.Start(t, 3)       // skips (or fails under REQUIRE_INTEGRATION=1) where it cannot run
//	cfg := f.KVMConfig()           // user, key, known_hosts, socket, pool, hosts for a kvm provider
//	f.Hosts[1].PauseLibvirtd()     // calls to kvm-1 now hang; f.Hosts[1].ResumeLibvirtd() ends it
//
// Nothing outlives the test: every process is killed and reaped in t.Cleanup, every process dies
// with the test process (parent-death signal), a host's sshd forks its per-connection processes
// into the host's PID namespace (whose end kills them), and the network namespaces are anonymous,
// so the kernel removes them, their veth pairs and their firewall rules with their last process.
package kvmhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

const (
	// marker starts the name of every directory this package creates. The processes of a host
	// carry the directory in their command line and the name holds the PID of the test process
	// that owns them, which is how Leftovers finds them.
	marker = "phe-kvm-"

	// SocketPath is where libvirtd listens on every host, as the host's sshd (and so a
	// direct-streamlocal channel) sees it: the standard path of a real host.
	SocketPath = "/run/libvirt/libvirt-sock"

	// DefaultPool is the name of the storage pool unless WithPool says otherwise.
	DefaultPool = "default"

	// User is the account the client key logs in as.
	User = "root"

	installHint = "apt-get install libvirt-daemon-system libvirt-clients openssh-server iproute2 iptables util-linux mount"

	startTimeout = 30 * time.Second
	stopGrace    = 10 * time.Second
)

// Fleet is a set of running hosts and the client credentials that reach them.
type Fleet struct {
	Hosts []*Host
	// Dir holds everything of the fleet; it is removed in the test's cleanup.
	Dir string
	// ClientKeyPath is an unencrypted ed25519 private key (OpenSSH format) that every host accepts
	// for User.
	ClientKeyPath string
	// KnownHostsPath lists every key of every host, one line per key, addresses in the form
	// knownhosts.Normalize writes.
	KnownHostsPath string
	// User is the login name for the client key ("root").
	User string

	tb        testing.TB
	keepVeths bool // LeaveVethToKernel
	stopOnce  sync.Once
}

// KVMConfig describes the fleet as a kvm provider block of the providers file: its user, key,
// known_hosts, socket, pool and hosts (named after the hosts, addressed host:port).
func (f *Fleet) KVMConfig() testenv.KVMBlock {
	c := testenv.KVMBlock{
		User:           f.User,
		PrivateKeyFile: f.ClientKeyPath,
		KnownHostsFile: f.KnownHostsPath,
		Socket:         SocketPath,
		StoragePool:    f.Hosts[0].Pool,
	}
	for _, h := range f.Hosts {
		c.Hosts = append(c.Hosts, testenv.KVMTarget{Address: h.Addr, Name: h.Name})
	}
	return c
}

// Host is one running host. Its methods cause and repair faults; they fail the test (via the tb
// given to Start) when they cannot, so call them from the test's goroutine.
type Host struct {
	// Name is the host's short name ("kvm-0").
	Name string
	// Hostname is what the host's gethostname, and so libvirt's ConnectGetHostname, reports.
	Hostname string
	// Addr is the address of the host's sshd, "198.18.x.y:22".
	Addr string
	// Socket is the libvirt socket to open a direct-streamlocal channel to (SocketPath).
	Socket string
	// Pool is the name of the host's dir storage pool.
	Pool string
	// Dir holds the host's configuration, keys, state, logs and the pool's target directory.
	Dir string
	// HostKeys are the host's current public host keys, one per type.
	HostKeys []ssh.PublicKey

	tb       testing.TB
	index    int
	veth     string
	outside  netip.Addr
	inside   netip.Addr
	sshdPath string

	mu          sync.Mutex
	holder      *testenv.Daemon // unshare, parent of PID 1 of the host's PID namespace
	holderIn    *os.File        // the holder's stdin: closing it ends the host
	pidNS       string          // the host's PID namespace, as /proc/PID/ns/pid reads
	nsInit      int             // PID 1 of the host's PID namespace, as this namespace numbers it
	sshd        *testenv.Daemon
	libvirtd    *testenv.Daemon
	unreachable bool
	// sshdExtra are directives of ConfigureSSHD, servedKeys the key types of ServeHostKeyTypes
	// (nil: every type), dns the resolver of DelayUserauth.
	sshdExtra  []string
	servedKeys []string
	dns        *slowDNS
}

// Option changes how Start sets hosts up.
type Option func(*options)

type options struct {
	pool              string
	leaveVethToKernel bool
}

// WithPool names the storage pool of every host (DefaultPool otherwise).
func WithPool(name string) Option { return func(o *options) { o.pool = name } }

// LeaveVethToKernel makes the cleanup leave each host's veth pair for the kernel to remove
// with the host's network namespace, instead of deleting it itself. A test of the cleanup uses it
// to see that the namespaces really end: a namespace that outlived its host would keep its veth
// pair, which Leftovers reports, whereas a deleted pair hides it.
func LeaveVethToKernel() Option { return func(o *options) { o.leaveVethToKernel = true } }

// hostSeq numbers hosts across the fleets of this process, for unique veth names.
var hostSeq atomic.Uint64

// Start starts n hosts and stops them in tb's cleanup. It calls testenv.Unavailable when the
// machine cannot run them (not root, a tool missing, namespaces not allowed), and skips the test
// under -short.
func Start(tb testing.TB, n int, opts ...Option) *Fleet {
	tb.Helper()
	if n < 1 || n > maxHostsPerNet {
		tb.Fatalf("kvmhost: %d hosts asked for, between 1 and %d are possible", n, maxHostsPerNet)
	}
	o := options{pool: DefaultPool}
	for _, opt := range opts {
		opt(&o)
	}
	requireMachine(tb)
	removeStaleDirs(os.TempDir())

	dir, err := os.MkdirTemp("", marker+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		tb.Fatalf("kvmhost: %v", err)
	}
	f := &Fleet{
		Dir:            dir,
		ClientKeyPath:  filepath.Join(dir, "id_ed25519"),
		KnownHostsPath: filepath.Join(dir, "known_hosts"),
		User:           User,
		tb:             tb,
		keepVeths:      o.leaveVethToKernel,
	}
	// Registered before anything starts, so a start that fails halfway is cleaned up too.
	tb.Cleanup(f.stop)

	sshdPath, _ := exec.LookPath("sshd")
	for i := range n {
		name := "kvm-" + strconv.Itoa(i)
		f.Hosts = append(f.Hosts, &Host{
			Name:     name,
			Hostname: name + ".kvmhost.test", // dotted, so libvirt does not try to resolve it
			Socket:   SocketPath,
			Pool:     o.pool,
			Dir:      filepath.Join(dir, name),
			tb:       tb,
			index:    i,
			veth:     vethName(os.Getpid(), hostSeq.Add(1)),
			sshdPath: sshdPath,
		})
	}
	for _, h := range f.Hosts {
		for _, sub := range []string{"run", "lib", "etc", "cache", "log", "pool"} {
			if err := os.MkdirAll(filepath.Join(h.Dir, sub), 0o755); err != nil {
				tb.Fatalf("kvmhost: create host dir: %v", err)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := f.start(ctx); err != nil {
		var unavailable *unavailableError
		if errors.As(err, &unavailable) {
			testenv.Unavailable(tb, "KVM test hosts: %v", err)
		}
		tb.Fatalf("kvmhost: start %d hosts: %v", n, err)
	}
	return f
}

// unavailableError marks a start failure that means "this machine cannot do it" rather than a bug.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// refusedByKernel marks err as unavailableError when the kernel refused the operation (EPERM
// or EACCES: a container or a security policy that allows no new namespaces, mounts or network
// interfaces) and returns it unchanged otherwise: any other failure is a bug to report, not a
// reason to skip. The tools report the errno only as text in their output, which err carries.
func refusedByKernel(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.ToLower(err.Error()) // "Operation not permitted" from C, lower case from Go
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(msg, syscall.EPERM.Error()) || strings.Contains(msg, syscall.EACCES.Error()) {
		return &unavailableError{err}
	}
	return err
}

// requireMachine ends the test through testenv.Unavailable when hosts cannot run here, and
// skips it under -short.
func requireMachine(tb testing.TB) {
	tb.Helper()
	testenv.SkipIfShort(tb, "starts KVM test hosts (sshd and libvirtd in network namespaces, as root)")
	if os.Geteuid() != 0 {
		testenv.Unavailable(tb, "KVM test hosts must run as root (they create network namespaces and mounts)")
	}
	if absent := missing(); absent != "" {
		testenv.Unavailable(tb, "KVM test hosts need %s: %s", absent, installHint)
	}
}

// missing lists the tools and directories hosts need that this machine lacks, or "".
func missing() string {
	var absent []string
	for _, tool := range []string{"libvirtd", "virsh", "sshd", "ip", "iptables", "unshare", "nsenter", "mount", "hostname"} {
		if _, err := exec.LookPath(tool); err != nil {
			absent = append(absent, tool)
		}
	}
	for _, d := range []string{"/etc/libvirt", "/var/lib/libvirt"} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			absent = append(absent, d)
		}
	}
	return strings.Join(absent, ", ")
}

func (f *Fleet) start(ctx context.Context) error {
	key, err := newKey("ed25519")
	if err != nil {
		return fmt.Errorf("generate client key: %w", err)
	}
	clientPub, err := writePrivateKey(f.ClientKeyPath, key, "kvmhost-client")
	if err != nil {
		return err
	}
	authorized := ssh.MarshalAuthorizedKey(clientPub)

	// Host keys take the longest to make (RSA); sshd needs them only at the end of boot.
	keys := make([]*keyJob, len(f.Hosts))
	for i, h := range f.Hosts {
		keys[i] = &keyJob{done: make(chan struct{})}
		go func() {
			defer close(keys[i].done)
			h.HostKeys, keys[i].err = writeHostKeys(h.Dir, h.Hostname)
		}()
	}
	defer func() {
		for _, k := range keys { // no goroutine outlives start, even when it fails early
			<-k.done
		}
	}()
	if err := eachHost(f.Hosts, func(h *Host) error { return h.prepare(ctx, authorized) }); err != nil {
		return err
	}
	if err := setupLinks(ctx, f.Hosts); err != nil {
		return refusedByKernel(err)
	}
	if err := eachHost(f.Hosts, func(h *Host) error { return h.boot(ctx, keys[h.index]) }); err != nil {
		return err
	}
	var kh strings.Builder
	for _, h := range f.Hosts {
		kh.WriteString(knownHostsLines(h.Addr, h.HostKeys))
	}
	if err := os.WriteFile(f.KnownHostsPath, []byte(kh.String()), 0o644); err != nil {
		return fmt.Errorf("write known_hosts: %w", err)
	}
	return nil
}

// keyJob is the generation of one host's keys; err is set when done closes.
type keyJob struct {
	done chan struct{}
	err  error
}

// eachHost runs fn for every host concurrently and returns the first error.
func eachHost(hosts []*Host, fn func(*Host) error) error {
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			if err := fn(h); err != nil {
				errs[i] = fmt.Errorf("%s: %w", h.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prepare writes the host's files and starts the process that holds its namespaces.
func (h *Host) prepare(ctx context.Context, authorizedKeys []byte) error {
	conf := libvirtdConf + fmt.Sprintf("log_outputs = \"3:stderr 1:file:%s\"\n", filepath.Join(h.Dir, rpcLog))
	if err := os.WriteFile(filepath.Join(h.Dir, "etc", "libvirtd.conf"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write libvirtd.conf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(h.Dir, "authorized_keys"), authorizedKeys, 0o600); err != nil {
		return fmt.Errorf("write authorized_keys: %w", err)
	}
	return refusedByKernel(h.startHolder(ctx))
}

// holderScript runs as PID 1 of the host's PID namespace, inside its new mount namespace: it
// gives the host private copies of what libvirtd and sshd write to, then waits for its stdin to
// close (the test's cleanup, or the test process's death), and its exit ends the namespace.
const holderScript = `set -e
dir=$1
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/libvirt /run/sshd
mount --bind "$dir/run" /run/libvirt
mount --bind "$dir/lib" /var/lib/libvirt
mount --bind "$dir/etc" /etc/libvirt
for d in cache log; do
	if [ -d "/var/$d/libvirt" ]; then mount --bind "$dir/$d" "/var/$d/libvirt"; fi
done
# The host's own interfaces in /sys, for libvirtd's device listing; cosmetic, so optional.
mount -t sysfs sysfs /sys 2>/dev/null || :
hostname "$2"
echo ready
read -r line || :
`

func (h *Host) startHolder(ctx context.Context) error {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return fmt.Errorf("pipe: %w", err)
	}
	defer readyR.Close()
	cmd := exec.Command("unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--kill-child",
		"--propagation", "private", "--", "sh", "-c", holderScript, "kvmhost-holder", h.Dir, h.Hostname)
	cmd.Stdin = stdinR
	cmd.Stdout = readyW
	cmd.Dir = h.Dir
	d, err := testenv.StartCommand("namespace holder", cmd, filepath.Join(h.Dir, "holder.log"))
	stdinR.Close()
	readyW.Close()
	if err != nil {
		stdinW.Close()
		return err
	}
	h.holder = d
	h.holderIn = stdinW

	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 6)
		_, err := io.ReadFull(readyR, buf)
		if err == nil && string(buf) != "ready\n" {
			err = fmt.Errorf("unexpected output %q", buf)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			<-d.Done()
			return withLog(d, fmt.Errorf("create namespaces: %w (exit: %v)", err, d.WaitErr()))
		}
	case <-ctx.Done():
		return withLog(d, fmt.Errorf("create namespaces: %w", ctx.Err()))
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(d.PID()) + "/ns/pid_for_children")
	if err != nil {
		return fmt.Errorf("read host PID namespace: %w", err)
	}
	h.pidNS = ns
	procs, err := listProcs()
	if err != nil {
		return err
	}
	for _, p := range procs {
		if p.ppid == d.PID() {
			h.nsInit = p.pid
		}
	}
	if h.nsInit == 0 {
		return errors.New("PID 1 of the host's PID namespace not found")
	}
	return nil
}

// nsenterArgs builds an nsenter command line that runs argv in the host's network (and, with
// all, mount and UTS) namespaces.
func (h *Host) nsenterArgs(all bool, argv ...string) []string {
	pid := strconv.Itoa(h.holder.PID())
	args := []string{"-t", pid, "-n"}
	if all {
		args = append(args, "-m", "-u")
	}
	return append(append(args, "--"), argv...)
}

// NetNSCommand returns a command line (nsenter and its arguments) that runs argv inside the
// host's network namespace, e.g. to add a firewall rule by hand. It is valid while the host runs.
func (h *Host) NetNSCommand(argv ...string) []string {
	return append([]string{"nsenter"}, h.nsenterArgs(false, argv...)...)
}

// boot brings up the host's network and daemons and defines its pool; sshd starts once keys
// has written the host keys.
func (h *Host) boot(ctx context.Context, keys *keyJob) error {
	h.Addr = net.JoinHostPort(h.inside.String(), "22")
	if err := h.setupInside(ctx); err != nil {
		return err
	}
	// Both daemons start at once; each waits for its own readiness.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[0] = h.startLibvirtd()
		if errs[0] == nil {
			errs[0] = h.definePool(ctx)
		}
	})
	wg.Go(func() {
		select {
		case <-keys.done:
			if keys.err != nil {
				errs[1] = keys.err
				return
			}
		case <-ctx.Done():
			errs[1] = fmt.Errorf("generate host keys: %w", ctx.Err())
			return
		}
		if errs[1] = h.writeSSHDConfig(ctx); errs[1] == nil {
			errs[1] = h.startSSHD()
		}
	})
	wg.Wait()
	return errors.Join(errs...)
}

const libvirtdConf = `# libvirtd of one test host: only reachable through its own socket, by root.
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
# Every RPC the daemon dispatches is logged to rpc.log (Host.RPCs counts them); the rest, warnings
# and errors, to stderr as before.
log_filters = "1:rpc.netserverprogram"
`

func (h *Host) sshdConfig(penalties bool) string {
	var b strings.Builder
	// sshd keeps the first value it reads of a keyword: the test's own directives come first.
	for _, d := range h.sshdExtra {
		b.WriteString(d + "\n")
	}
	fmt.Fprintf(&b, "ListenAddress %s\n", h.Addr)
	served := hostKeyTypes
	if h.servedKeys != nil {
		served = h.servedKeys
	}
	for _, kt := range served {
		fmt.Fprintf(&b, "HostKey %s\n", hostKeyPath(h.Dir, kt))
	}
	fmt.Fprintf(&b, "PidFile %s\n", filepath.Join(h.Dir, "sshd.pid"))
	fmt.Fprintf(&b, "AuthorizedKeysFile %s\n", filepath.Join(h.Dir, "authorized_keys"))
	// sshd lets direct-streamlocal channels through only when local TCP forwarding is allowed
	// too (it is by default), so AllowTcpForwarding stays on, as on a real host.
	b.WriteString(`PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
AllowStreamLocalForwarding yes
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
LogLevel VERBOSE
`)
	if penalties {
		// OpenSSH 9.8+ would refuse the test's own address for a while after the faults the
		// tests cause on purpose (killed connections, failed host key checks).
		b.WriteString("PerSourcePenalties no\n")
	}
	return b.String()
}

// sshdKnowsPenalties caches whether this sshd accepts PerSourcePenalties (OpenSSH 9.8 and later).
var sshdKnowsPenalties atomic.Int32 // 0 unknown, 1 yes, 2 no

// writeSSHDConfig writes sshd_config and validates it with sshd -t inside the host, where the
// privilege separation directory exists.
func (h *Host) writeSSHDConfig(ctx context.Context) error {
	path := filepath.Join(h.Dir, "sshd_config")
	write := func(penalties bool) error {
		if err := os.WriteFile(path, []byte(h.sshdConfig(penalties)), 0o644); err != nil {
			return fmt.Errorf("write sshd_config: %w", err)
		}
		return nil
	}
	check := func() (string, error) {
		return run(ctx, "", "nsenter", h.nsenterArgs(true, h.sshdPath, "-t", "-f", path)...)
	}
	// A configuration changed by the test (ConfigureSSHD, ServeHostKeyTypes) is always checked:
	// a directive sshd refuses fails here, not as a dial failure the test would misread.
	custom := h.sshdExtra != nil || h.servedKeys != nil
	if sshdKnowsPenalties.Load() == 2 {
		if err := write(false); err != nil || !custom {
			return err
		}
		if _, err := check(); err != nil {
			return fmt.Errorf("check sshd_config: %w", err)
		}
		return nil
	}
	if err := write(true); err != nil {
		return err
	}
	if sshdKnowsPenalties.Load() == 1 && !custom {
		return nil
	}
	out, err := check()
	if err == nil {
		sshdKnowsPenalties.Store(1)
		return nil
	}
	if !strings.Contains(out, "PerSourcePenalties") {
		return fmt.Errorf("check sshd_config: %w", err)
	}
	sshdKnowsPenalties.Store(2)
	if err := write(false); err != nil {
		return err
	}
	if _, err := check(); err != nil {
		return fmt.Errorf("check sshd_config: %w", err)
	}
	return nil
}

// startSSHD starts the host's sshd and waits until it listens. sshd itself stays in the test's
// PID namespace (so it is this process's child and gets the parent-death signal), but forks its
// per-connection processes into the host's PID namespace (nsenter -p without forking sets the
// namespace for children only), which dies with the host.
func (h *Host) startSSHD() error {
	pid := h.holder.PID()
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "-m", "-u",
		"--pid=/proc/"+strconv.Itoa(pid)+"/ns/pid_for_children", "-F", "--",
		h.sshdPath, "-D", "-e", "-f", filepath.Join(h.Dir, "sshd_config"))
	cmd.Dir = h.Dir
	d, err := testenv.StartCommand("sshd", cmd, filepath.Join(h.Dir, "sshd.log"))
	if err != nil {
		return err
	}
	h.sshd = d
	return waitFor(d, startTimeout, "sshd to listen", func() (bool, error) {
		n, err := countTCP(pid, tcpListen, 22)
		return n > 0, err
	})
}

// startLibvirtd starts the host's libvirtd and waits until it serves its socket. libvirtd is
// multi-threaded, which a process whose children go to another PID namespace cannot be, so it
// stays in the test's PID namespace; it forks nothing that outlives a call.
func (h *Host) startLibvirtd() error {
	sock := filepath.Join(h.Dir, "run", "libvirt-sock")
	// A socket left by a killed libvirtd would pass for a ready one.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	cmd := exec.Command("nsenter", append(h.nsenterArgs(true), "libvirtd", "--pid-file", filepath.Join(h.Dir, "libvirtd.pid"))...)
	cmd.Dir = h.Dir
	d, err := testenv.StartCommand("libvirtd", cmd, filepath.Join(h.Dir, "libvirtd.log"))
	if err != nil {
		return err
	}
	h.libvirtd = d
	return waitFor(d, startTimeout, "libvirtd to serve "+sock, func() (bool, error) {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return false, nil // not listening yet
		}
		c.Close()
		return true, nil
	})
}

// uri is the libvirt URI of the host's daemon from the test's side (the socket is the same file
// through the bind mount).
func (h *Host) uri() string {
	return "qemu+unix:///system?socket=" + filepath.Join(h.Dir, "run", "libvirt-sock")
}

func (h *Host) virsh(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "", "virsh", append([]string{"-q", "-c", h.uri()}, args...)...)
}

// definePool defines, builds, starts and marks for autostart the host's pool, so that a
// restarted libvirtd brings it back like on a real host.
func (h *Host) definePool(ctx context.Context) error {
	xmlPath := filepath.Join(h.Dir, "pool.xml")
	xml := fmt.Sprintf("<pool type='dir'>\n  <name>%s</name>\n  <target>\n    <path>%s</path>\n  </target>\n</pool>\n",
		h.Pool, filepath.Join(h.Dir, "pool"))
	if err := os.WriteFile(xmlPath, []byte(xml), 0o644); err != nil {
		return fmt.Errorf("write pool xml: %w", err)
	}
	cmds := fmt.Sprintf("pool-define %s; pool-build %s; pool-start %s; pool-autostart %s", xmlPath, h.Pool, h.Pool, h.Pool)
	if _, err := h.virsh(ctx, cmds); err != nil {
		return fmt.Errorf("define pool: %w", err)
	}
	return nil
}

// stop is the fleet's cleanup.
func (f *Fleet) stop() { f.stopOnce.Do(f.stopHosts) }

func (f *Fleet) stopHosts() {
	var wg sync.WaitGroup
	for _, h := range f.Hosts {
		wg.Go(func() { h.shutdown(f.keepVeths) })
	}
	wg.Wait()
	if f.tb.Failed() {
		for _, h := range f.Hosts {
			for _, log := range []string{"sshd.log", "libvirtd.log", "holder.log"} {
				p := filepath.Join(h.Dir, log)
				if _, err := os.Stat(p); err == nil {
					f.tb.Logf("kvmhost: %s %s: %s", h.Name, log, strings.ReplaceAll(testenv.LogTail(p, 20), "\n", " | "))
				}
			}
		}
	}
	if err := os.RemoveAll(f.Dir); err != nil {
		f.tb.Errorf("kvmhost: remove %s: %v", f.Dir, err)
	}
}

// shutdown kills everything of the host and waits for it: the daemons, then the namespace
// holder, whose exit makes the kernel kill every process left in the host's PID namespace (sshd's
// connections) before the holder is reaped. Then it deletes the veth pair, unless keepVeth.
func (h *Host) shutdown(keepVeth bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range []*testenv.Daemon{h.sshd, h.libvirtd} {
		if d != nil {
			d.Stop(syscall.SIGKILL, stopGrace)
		}
	}
	if h.dns != nil {
		h.dns.close()
	}
	if h.holder != nil {
		// With its stdin closed the namespace's PID 1 exits, the kernel kills and reaps what is
		// left in the namespace, and unshare exits after reaping it.
		h.holderIn.Close()
		select {
		case <-h.holder.Done():
		case <-time.After(stopGrace):
			// Killed, unshare no longer waits for PID 1, which --kill-child kills; PID 1 turns
			// into a zombie only after the kernel has emptied its namespace.
			h.holder.Stop(syscall.SIGKILL, stopGrace)
			if h.nsInit != 0 {
				if err := waitExited(h.nsInit, stopGrace); err != nil {
					h.tb.Errorf("kvmhost: %s: %v", h.Name, err)
				}
			}
		}
	}
	if keepVeth {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	if err := deleteVeth(ctx, h.veth); err != nil {
		h.tb.Errorf("kvmhost: %s: %v", h.Name, err)
	}
}
