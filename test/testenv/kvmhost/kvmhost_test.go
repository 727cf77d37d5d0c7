package kvmhost

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// hostKeyAlgorithms lists the host key algorithms known_hosts can verify for addr, so the
// handshake never picks a key type the file has no line for. It probes the callback with a key
// nobody knows: the mismatch error lists the keys it wanted.
func hostKeyAlgorithms(cb ssh.HostKeyCallback, addr string) ([]string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	tcpAddr, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	var keyErr *knownhosts.KeyError
	if err := cb(addr, tcpAddr, probe); !errors.As(err, &keyErr) || len(keyErr.Want) == 0 {
		return nil, fmt.Errorf("known_hosts has no key for %s (%v)", addr, err)
	}
	var algos []string
	seen := map[string]bool{}
	for _, w := range keyErr.Want {
		names := []string{w.Key.Type()}
		if w.Key.Type() == ssh.KeyAlgoRSA {
			// An RSA key signs with SHA-2 for current servers; "ssh-rsa" (SHA-1) is refused.
			names = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				algos = append(algos, n)
			}
		}
	}
	return algos, nil
}

// clientConfig is the SSH client configuration for host h of f: the fleet's key, known_hosts
// verification, host key algorithms from known_hosts (or only algos, when given).
func clientConfig(t testing.TB, f *Fleet, h *Host, algos ...string) *ssh.ClientConfig {
	t.Helper()
	keyPEM, err := os.ReadFile(f.ClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatalf("client key: %v", err)
	}
	cb, err := knownhosts.New(f.KnownHostsPath)
	if err != nil {
		t.Fatalf("known_hosts: %v", err)
	}
	if len(algos) == 0 {
		if algos, err = hostKeyAlgorithms(cb, h.Addr); err != nil {
			t.Fatal(err)
		}
	}
	return &ssh.ClientConfig{
		User:              f.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   cb,
		HostKeyAlgorithms: algos,
	}
}

// dialSSH connects and authenticates within ctx: the handshake is bounded too, not only the
// TCP connect.
func dialSSH(ctx context.Context, addr string, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

func mustSSH(t testing.TB, f *Fleet, h *Host) *ssh.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h))
	if err != nil {
		t.Fatalf("ssh to %s (%s): %v", h.Name, h.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connectLibvirt opens a direct-streamlocal channel to the host's libvirt socket and speaks
// libvirt's RPC over it. Closing the SSH client ends it (Disconnect would wait on a dead link).
func connectLibvirt(c *ssh.Client, socket string) (*libvirt.Libvirt, error) {
	conn, err := c.Dial("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("open channel to %s: %w", socket, err)
	}
	oc := &orderedConn{Conn: conn}
	l := libvirt.NewWithDialer(dialers.NewAlreadyConnected(oc))
	if err := l.ConnectToURI(libvirt.QEMUSystem); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to %s: %w", libvirt.QEMUSystem, err)
	}
	oc.connected.Store(true)
	return l, nil
}

// orderedConn works around a data race in go-libvirt: ConnectToURI assigns the Libvirt's
// disconnected channel after starting the goroutine that reads it once the connection ends,
// with nothing ordering the two. When the end comes from the other side (a daemon stopped, a
// connection killed: what these tests do), the race detector reports it. The atomic store after
// ConnectToURI, loaded before the end of the connection is reported, orders them.
type orderedConn struct {
	net.Conn
	connected atomic.Bool
}

func (c *orderedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.connected.Load()
	}
	return n, err
}

func mustLibvirt(t testing.TB, f *Fleet, h *Host) (*ssh.Client, *libvirt.Libvirt) {
	t.Helper()
	c := mustSSH(t, f, h)
	l, err := connectLibvirt(c, h.Socket)
	if err != nil {
		t.Fatalf("%s: %v", h.Name, err)
	}
	return c, l
}

type poolState struct {
	state                           libvirt.StoragePoolState
	capacity, allocation, available uint64
}

func getPool(l *libvirt.Libvirt, name string) (poolState, error) {
	p, err := l.StoragePoolLookupByName(name)
	if err != nil {
		return poolState{}, err
	}
	st, c, a, av, err := l.StoragePoolGetInfo(p)
	if err != nil {
		return poolState{}, err
	}
	return poolState{libvirt.StoragePoolState(st), c, a, av}, nil
}

// TestSmoke proves the hosts are real: over SSH and a streamlocal channel to each host's own
// libvirtd, the library version, the host's own hostname and its pool's state and sizes (the
// same as virsh reports) come back, every host key type verifies, and hosts fail independently.
func TestSmoke(t *testing.T) {
	t.Parallel()
	f := Start(t, 3)
	if len(f.Hosts) != 3 {
		t.Fatalf("got %d hosts, want 3", len(f.Hosts))
	}
	addrs := map[string]bool{}
	conns := make([]*libvirt.Libvirt, len(f.Hosts))
	for i, h := range f.Hosts {
		if addrs[h.Addr] {
			t.Fatalf("address %s used twice", h.Addr)
		}
		addrs[h.Addr] = true
		_, l := mustLibvirt(t, f, h)
		conns[i] = l

		ver, err := l.ConnectGetLibVersion()
		if err != nil {
			t.Fatalf("%s: lib version: %v", h.Name, err)
		}
		// The daemon binary says its version too (virsh version --daemon would also need qemu).
		out, err := exec.Command("libvirtd", "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("libvirtd --version: %v: %s", err, out)
		}
		m := regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("libvirtd --version: %q", out)
		}
		major, _ := strconv.ParseUint(m[1], 10, 64)
		minor, _ := strconv.ParseUint(m[2], 10, 64)
		micro, _ := strconv.ParseUint(m[3], 10, 64)
		if want := major*1_000_000 + minor*1_000 + micro; ver != want {
			t.Errorf("%s: ConnectGetLibVersion = %d, libvirtd --version says %d", h.Name, ver, want)
		}

		hostname, err := l.ConnectGetHostname()
		if err != nil {
			t.Fatalf("%s: hostname: %v", h.Name, err)
		}
		if hostname != h.Hostname {
			t.Errorf("%s: hostname %q, want %q: not the host's own libvirtd", h.Name, hostname, h.Hostname)
		}

		got, err := getPool(l, h.Pool)
		if err != nil {
			t.Fatalf("%s: pool %q: %v", h.Name, h.Pool, err)
		}
		want := h.PoolInfo()
		if got.state != libvirt.StoragePoolRunning || want.State != "running" {
			t.Errorf("%s: pool state %d (virsh: %s), want running", h.Name, got.state, want.State)
		}
		if got.capacity == 0 || got.capacity != want.Capacity || got.allocation != want.Allocation || got.available != want.Available {
			t.Errorf("%s: pool sizes %+v, virsh says %+v", h.Name, got, want)
		}
		if !want.Persistent || !want.Autostart {
			t.Errorf("%s: pool not persistent and autostarted: %+v", h.Name, want)
		}
	}

	// known_hosts holds every type of every host: a client limited to any one type verifies.
	for _, algo := range []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA512} {
		h := f.Hosts[0]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h, algo))
		cancel()
		if err != nil {
			t.Errorf("handshake with host key algorithm %s: %v", algo, err)
			continue
		}
		c.Close()
	}

	// The exporter's default socket path (/var/run/...) reaches the same daemon.
	c := mustSSH(t, f, f.Hosts[0])
	if _, err := connectLibvirt(c, kvm.DefaultSocket); err != nil {
		t.Errorf("default socket path %s: %v", kvm.DefaultSocket, err)
	}

	// The providers-file view of the fleet names what the test used.
	kc := f.KVMConfig()
	if kc.User != "root" || kc.PrivateKeyFile != f.ClientKeyPath || kc.KnownHostsFile != f.KnownHostsPath ||
		kc.Socket != f.Hosts[0].Socket || kc.StoragePool != DefaultPool || len(kc.Hosts) != 3 ||
		kc.Hosts[2].Address != f.Hosts[2].Addr || kc.Hosts[2].Name != f.Hosts[2].Name {
		t.Errorf("KVMConfig: %+v", kc)
	}

	// Stopping host 1's libvirtd leaves host 2 alone, on its open connection and on a new one.
	f.Hosts[1].StopLibvirtd()
	if _, err := conns[1].ConnectGetHostname(); err == nil {
		t.Errorf("%s: a call succeeded with libvirtd stopped", f.Hosts[1].Name)
	}
	if name, err := conns[2].ConnectGetHostname(); err != nil || name != f.Hosts[2].Hostname {
		t.Errorf("%s on its open connection after %s's libvirtd stopped: %q, %v", f.Hosts[2].Name, f.Hosts[1].Name, name, err)
	}
	_, l := mustLibvirt(t, f, f.Hosts[2])
	if _, err := getPool(l, f.Hosts[2].Pool); err != nil {
		t.Errorf("%s on a new connection after %s's libvirtd stopped: %v", f.Hosts[2].Name, f.Hosts[1].Name, err)
	}
}

func TestStopSSHD(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	established := mustSSH(t, f, h)

	h.StopSSHD()
	_, err := net.DialTimeout("tcp", h.Addr, 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial with sshd stopped: %v, want connection refused", err)
	}
	// As with a real sshd, stopping the listener leaves established connections alone.
	if _, _, err := established.SendRequest("keepalive@openssh.com", true, nil); err != nil {
		t.Fatalf("established connection after StopSSHD: %v", err)
	}
	if n := h.TCPConnections(); n != 1 {
		t.Fatalf("%d connections after StopSSHD, want the established one", n)
	}

	h.StartSSHD()
	mustSSH(t, f, h)
}

func TestStopLibvirtd(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	c := mustSSH(t, f, h)

	h.StopLibvirtd()
	_, err := c.Dial("unix", h.Socket)
	var openErr *ssh.OpenChannelError
	if !errors.As(err, &openErr) {
		t.Fatalf("channel to the socket of a stopped libvirtd: %v, want *ssh.OpenChannelError", err)
	}
	// SSH itself is fine: the server answers a keepalive and a new channel open attempt.
	if _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err != nil {
		t.Fatalf("ssh keepalive with libvirtd stopped: %v", err)
	}

	h.StartLibvirtd()
	l, err := connectLibvirt(c, h.Socket)
	if err != nil {
		t.Fatalf("after StartLibvirtd: %v", err)
	}
	p, err := getPool(l, h.Pool)
	if err != nil || p.state != libvirt.StoragePoolRunning {
		t.Fatalf("pool after a libvirtd restart: %+v, %v; want running (autostart)", p, err)
	}
}

func TestPauseLibvirtd(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	c, l := mustLibvirt(t, f, h)

	h.PauseLibvirtd()
	type result struct {
		name string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		name, err := l.ConnectGetHostname()
		res <- result{name, err}
	}()
	select {
	case r := <-res:
		h.ResumeLibvirtd()
		t.Fatalf("call returned while libvirtd is stopped: %q, %v", r.name, r.err)
	case <-time.After(2 * time.Second):
	}
	// The link itself is alive: sshd answers.
	if _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); err != nil {
		t.Fatalf("ssh keepalive with libvirtd paused: %v", err)
	}

	h.ResumeLibvirtd()
	select {
	case r := <-res:
		if r.err != nil || r.name != h.Hostname {
			t.Fatalf("hung call after resume: %q, %v", r.name, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hung call did not complete after resume")
	}
	if _, err := l.ConnectGetLibVersion(); err != nil {
		t.Fatalf("next call on the same connection: %v", err)
	}
}

func TestDestroyPool(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	_, l := mustLibvirt(t, f, h)

	h.DestroyPool()
	p, err := getPool(l, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if p.state != libvirt.StoragePoolInactive {
		t.Fatalf("state after destroy: %d, want inactive", p.state)
	}
	if s := h.PoolInfo().State; s != "inactive" {
		t.Fatalf("virsh state after destroy: %q", s)
	}

	h.StartPool()
	if p, err = getPool(l, h.Pool); err != nil || p.state != libvirt.StoragePoolRunning {
		t.Fatalf("after StartPool: %+v, %v", p, err)
	}
}

func TestUndefinePool(t *testing.T) {
	t.Parallel()
	f := Start(t, 1, WithPool("images"))
	h := f.Hosts[0]
	if h.Pool != "images" {
		t.Fatalf("pool name %q, want images", h.Pool)
	}
	_, l := mustLibvirt(t, f, h)
	if _, err := getPool(l, "images"); err != nil {
		t.Fatalf("pool images: %v", err)
	}

	h.UndefinePool()
	_, err := l.StoragePoolLookupByName(h.Pool)
	var lerr libvirt.Error
	if !errors.As(err, &lerr) || lerr.Code != uint32(libvirt.ErrNoStoragePool) {
		t.Fatalf("lookup of an undefined pool: %v, want libvirt error %d", err, libvirt.ErrNoStoragePool)
	}
	if out, err := h.Virsh("pool-info", h.Pool); err == nil {
		t.Fatalf("virsh still sees the pool: %s", out)
	}

	h.DefinePool()
	if p, err := getPool(l, h.Pool); err != nil || p.state != libvirt.StoragePoolRunning {
		t.Fatalf("after DefinePool: %+v, %v", p, err)
	}
}

func TestReplaceHostKey(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	mustSSH(t, f, h).Close()
	old := h.HostKeys

	h.ReplaceHostKey()
	for i := range old {
		if string(old[i].Marshal()) == string(h.HostKeys[i].Marshal()) {
			t.Fatalf("%s key not replaced", old[i].Type())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dialSSH(ctx, h.Addr, clientConfig(t, f, h))
	var keyErr *knownhosts.KeyError
	if !errors.As(err, &keyErr) || len(keyErr.Want) == 0 {
		t.Fatalf("handshake after the host key changed: %v, want a knownhosts key mismatch", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	established := mustSSH(t, f, h)

	h.MakeUnreachable()
	// An established connection stalls: a keepalive gets no answer while the host drops packets,
	// and gets it once the host is reachable again.
	answered := make(chan error, 1)
	go func() {
		_, _, err := established.SendRequest("keepalive@openssh.com", true, nil)
		answered <- err
	}()
	select {
	case err := <-answered:
		t.Fatalf("keepalive answered by an unreachable host: %v", err)
	case <-time.After(time.Second):
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", h.Addr)
	if err == nil {
		conn.Close()
		t.Fatal("dial to an unreachable host succeeded")
	}
	var netErr net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("dial to an unreachable host: %v, want a timeout", err)
	}

	h.MakeReachable()
	mustSSH(t, f, h)
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("stalled keepalive after MakeReachable: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stalled keepalive not answered after MakeReachable")
	}
}

func TestKillSSHConnections(t *testing.T) {
	t.Parallel()
	f := Start(t, 1)
	h := f.Hosts[0]
	if n := h.TCPConnections(); n != 0 {
		t.Fatalf("%d connections before any client", n)
	}
	c1 := mustSSH(t, f, h)
	mustSSH(t, f, h)
	if n := h.TCPConnections(); n != 2 {
		t.Fatalf("%d connections with two clients, want 2", n)
	}
	ended := make(chan error, 1)
	go func() { ended <- c1.Wait() }()

	h.KillSSHConnections()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("client did not notice its connection was killed")
	}
	if n := h.TCPConnections(); n != 0 {
		t.Fatalf("%d connections after killing them", n)
	}
	mustSSH(t, f, h) // the listener survives
}

// TestCleanup stops a fleet in the middle of faults (a paused libvirtd, a host dropping packets
// with a connection open) and checks that nothing of it is left.
func TestCleanup(t *testing.T) {
	t.Parallel()
	f := Start(t, 2)
	h := f.Hosts[0]
	mustLibvirt(t, f, h)
	h.PauseLibvirtd()
	h.MakeUnreachable()
	pids := []int{h.holder.PID(), h.nsInit, h.sshd.PID(), h.libvirtd.PID(), f.Hosts[1].sshd.PID()}
	conns, err := procsInPIDNamespace(h.pidNS)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range conns {
		if p.pid != h.nsInit {
			pids = append(pids, p.pid)
		}
	}
	if len(pids) < 6 {
		t.Fatalf("no sshd connection process found in the host's PID namespace: %+v", conns)
	}

	f.stop()
	for _, pid := range pids {
		if p, ok := readProc(pid); ok && p.state != 'Z' {
			t.Errorf("process %d still running: %s", pid, p.cmdline)
		}
	}
	procs, err := listProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if strings.Contains(p.cmdline, f.Dir) {
			t.Errorf("process %d of the fleet still running: %s", p.pid, p.cmdline)
		}
	}
	for _, h := range f.Hosts {
		if _, err := net.InterfaceByName(h.veth); err == nil {
			t.Errorf("veth %s still present", h.veth)
		}
	}
	if _, err := os.Stat(f.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fleet dir %s still present: %v", f.Dir, err)
	}
}

// leakChildEnv, set to a mode, makes TestLeftoversAfterPanic run as its own subprocess.
const leakChildEnv = "KVMHOST_LEAK_CHILD"

// TestLeftoversAfterPanic runs a test process that starts hosts then dies, and checks that it
// left nothing behind: "panic" panics in the test (t.Cleanup runs, and leaves the veth pairs for
// the kernel to remove with the namespaces, so a namespace that outlived its host shows), "crash"
// panics in another goroutine with an SSH connection open to a host that drops packets (no
// cleanup runs: only the parent-death signal and the PID namespace clean up, and no FIN reaches
// sshd).
func TestLeftoversAfterPanic(t *testing.T) {
	if mode := os.Getenv(leakChildEnv); mode != "" {
		leakChild(t, mode)
		return
	}
	requireMachine(t)
	t.Parallel()
	for _, mode := range []string{"panic", "crash"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "-test.run=^TestLeftoversAfterPanic$", "-test.v", "-test.timeout=2m")
			// The crashing child cannot remove its fleet's directory: it goes under this test's.
			childTmp := t.TempDir()
			cmd.Env = testenv.ChildEnv(childTmp, leakChildEnv+"="+mode)
			var out strings.Builder
			cmd.Stdout = &out
			cmd.Stderr = &out
			err = testutil.StartProcess(t, cmd).Wait()
			if err == nil {
				t.Fatalf("child passed, want a panic:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "kvmhost leak child: started") || !strings.Contains(out.String(), "panic: ") {
				t.Fatalf("child did not start hosts then panic (%v):\n%s", err, out.String())
			}
			pid := cmd.ProcessState.Pid()
			// The kernel frees a network namespace, and with it the veth pair, asynchronously.
			var left []string
			exited := time.Now()
			for deadline := exited.Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if left, err = LeftoversOf(pid); err != nil {
					t.Fatal(err)
				}
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(left) > 0 {
				t.Fatalf("left behind by test process %d:\n%s", pid, strings.Join(left, "\n"))
			}
			t.Logf("nothing of test process %d left %s after it exited", pid, time.Since(exited).Round(time.Millisecond))
			// A crash leaves the fleet's directory; the next Start (in the same TMPDIR) removes it.
			removeStaleDirs(childTmp)
			if dirs, _ := filepath.Glob(filepath.Join(childTmp, marker+strconv.Itoa(pid)+"-*")); len(dirs) > 0 {
				t.Errorf("directories of test process %d left: %v", pid, dirs)
			}
		})
	}
}

// leakChild is TestLeftoversAfterPanic in its subprocess: it starts hosts, opens connections
// to them, then dies the way mode says.
func leakChild(t *testing.T, mode string) {
	f := Start(t, 3, LeaveVethToKernel())
	for _, h := range f.Hosts {
		mustLibvirt(t, f, h)
	}
	h := f.Hosts[0]
	h.MakeUnreachable()
	fmt.Printf("kvmhost leak child: started %d hosts, %d connections to %s\n", len(f.Hosts), h.TCPConnections(), h.Name)
	if mode == "crash" {
		go func() { panic("kvmhost leak child: crash on purpose") }()
		select {}
	}
	panic("kvmhost leak child: panic on purpose")
}

func TestParsePoolInfo(t *testing.T) {
	running := `Name:           default
UUID:           4f1e7f4c-7f0e-4d0c-9a5e-0f7f0a1f3e11
State:          running
Persistent:     yes
Autostart:      yes
Capacity:       105089261568
Allocation:     41556152320
Available:      63533109248
`
	got, err := parsePoolInfo(running)
	want := PoolInfo{State: "running", Persistent: true, Autostart: true, Capacity: 105089261568, Allocation: 41556152320, Available: 63533109248}
	if err != nil || got != want {
		t.Fatalf("running: %+v, %v; want %+v", got, err, want)
	}
	got, err = parsePoolInfo("Name:           default\nState:          inactive\nPersistent:     yes\nAutostart:      no\n")
	if want := (PoolInfo{State: "inactive", Persistent: true}); err != nil || got != want {
		t.Fatalf("inactive: %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "State: running\n", "State: running\nCapacity: 12 KiB\n"} {
		if got, err := parsePoolInfo(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, got)
		}
	}
}

func TestParseProcNetTCP(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 020012C6:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 020012C6:0016 010012C6:D3F2 01 00000000:00000000 02:000A7C2D 00000000     0        0 2 2 0 20 4 30 10 -1
   2: 020012C6:0016 010012C6:D3F4 01 00000000:00000000 02:000A7C2D 00000000     0        0 3 2 0 20 4 30 10 -1
   3: 020012C6:9C40 010012C6:0016 01 00000000:00000000 02:000A7C2D 00000000     0        0 4 2 0 20 4 30 10 -1
   4: 020012C6:0016 010012C6:D3F6 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0
`
	for _, tc := range []struct {
		state uint64
		want  int
	}{{tcpListen, 1}, {tcpEstablished, 2}, {0x06, 1}} {
		n, err := parseProcNetTCP(strings.NewReader(table), tc.state, 22)
		if err != nil || n != tc.want {
			t.Errorf("state %#x: %d, %v; want %d", tc.state, n, err, tc.want)
		}
	}
}

func TestOwners(t *testing.T) {
	for _, tc := range []struct {
		s    string
		pid  int
		want bool
	}{
		{"sshd: /usr/sbin/sshd -D -e -f /tmp/phe-kvm-4242-123456/kvm-0/sshd_config [listener]", 4242, true},
		{"libvirtd --pid-file /tmp/phe-kvm-subnet.lock /tmp/phe-kvm-77-1/kvm-1/libvirtd.pid", 77, true},
		{"/tmp/phe-kvm-subnet.lock", 0, false},
		{"sshd: root [priv]", 0, false},
	} {
		pid, ok := ownerFromMarker(tc.s)
		if ok != tc.want || pid != tc.pid {
			t.Errorf("ownerFromMarker(%q) = %d, %v", tc.s, pid, ok)
		}
	}
	if pid, ok := ownerFromVeth("phk4194304-zz"); !ok || pid != 4194304 {
		t.Errorf("ownerFromVeth: %d, %v", pid, ok)
	}
	if _, ok := ownerFromVeth("eth0"); ok {
		t.Error("eth0 has an owner")
	}
}

// TestRefusedByKernel checks which start failures count as "this machine cannot run hosts", on
// the real output of the tools: a namespace the kernel refuses to an unprivileged process does,
// a failure of any other kind does not.
func TestRefusedByKernel(t *testing.T) {
	testenv.SkipIfShort(t, "runs unshare (new namespaces) and ip")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	argv := []string{"unshare", "--net", "--mount", "true"}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("setpriv"); err != nil {
			testenv.Unavailable(t, "setpriv not found: apt-get install util-linux")
		}
		argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, argv...)
	}
	_, refused := run(ctx, "", argv[0], argv[1:]...)
	if refused == nil {
		t.Fatalf("%s succeeded for an unprivileged process", strings.Join(argv, " "))
	}
	var unavailable *unavailableError
	if err := refusedByKernel(refused); !errors.As(err, &unavailable) {
		t.Errorf("refusedByKernel(%v) is not unavailable", refused)
	}
	_, other := run(ctx, "", "ip", "link", "show", "dev", vethPrefix+"nosuch0")
	if other == nil {
		t.Fatal("ip link show of a missing device succeeded")
	}
	if err := refusedByKernel(other); errors.As(err, &unavailable) || err != other {
		t.Errorf("refusedByKernel(%v) = %v, want the error unchanged", other, err)
	}
	if refusedByKernel(nil) != nil {
		t.Error("refusedByKernel(nil) != nil")
	}
}

// TestVethName checks the names Start gives veth pairs: within IFNAMSIZ-1 (15) bytes even for
// the largest PID Linux allows and any sequence number, distinct within a process, and read
// back to their owner by Leftovers.
func TestVethName(t *testing.T) {
	const maxPID = 4194304 // PID_MAX_LIMIT on 64-bit Linux
	seen := map[string]uint64{}
	for _, pid := range []int{1, os.Getpid(), maxPID} {
		for _, seq := range []uint64{0, 1, 35, 36, vethSeqs - 1, vethSeqs, vethSeqs + 1, math.MaxUint64} {
			name := vethName(pid, seq)
			if len(name) > 15 {
				t.Errorf("vethName(%d, %d) = %q, %d bytes: longer than IFNAMSIZ-1 (15)", pid, seq, name, len(name))
			}
			if owner, ok := ownerFromVeth(name); !ok || owner != pid {
				t.Errorf("ownerFromVeth(%q) = %d, %v; want %d", name, owner, ok, pid)
			}
		}
		// The first hosts of a process, and those just before the sequence wraps.
		for _, seq := range append(seqRange(0, 4096), seqRange(vethSeqs-4096, vethSeqs)...) {
			name := vethName(pid, seq)
			if prev, dup := seen[name]; dup {
				t.Fatalf("vethName(%d, %d) = %q, the same as for sequence %d", pid, seq, name, prev)
			}
			seen[name] = seq
		}
		clear(seen)
	}
	if got := vethName(maxPID, vethSeqs-1); got != "phk4194304-zzzz" {
		t.Errorf("longest veth name = %q, want phk4194304-zzzz", got)
	}
}

func TestHostAddrs(t *testing.T) {
	out, in := hostAddrs(0, 0)
	if out.String() != "198.18.0.1" || in.String() != "198.18.0.2" {
		t.Errorf("subnet 0 host 0: %s %s", out, in)
	}
	out, in = hostAddrs(subnets-1, maxHostsPerNet-1)
	if out.String() != "198.19.255.253" || in.String() != "198.19.255.254" {
		t.Errorf("last subnet, last host: %s %s", out, in)
	}
	if !benchmarkNet.Contains(out) || !benchmarkNet.Contains(in) {
		t.Error("address outside 198.18.0.0/15")
	}
}

func seqRange(from, to uint64) []uint64 {
	var seqs []uint64
	for s := from; s < to; s++ {
		seqs = append(seqs, s)
	}
	return seqs
}

// BenchmarkStart measures starting three hosts, ready to serve SSH and libvirt.
func BenchmarkStart(b *testing.B) {
	for range b.N {
		f := Start(b, 3)
		b.StopTimer()
		f.stop()
		b.StartTimer()
	}
}
