// Package kvmstandin is a scale stand-in for KVM hosts, for tests and benchmarks that need
// hundreds of them: each stand-in host is an in-process SSH server (golang.org/x/crypto/ssh) on
// its own loopback address that answers direct-streamlocal channels with a minimal libvirt RPC
// responder (auth list, connect, library version, hostname, storage pool lookup and info).
//
// It is NOT a KVM host. Real hosts (package kvmhost: sshd + libvirtd in network namespaces)
// prove the semantics; the stand-in proves scale, and every test or figure that uses it says so.
// What it reproduces faithfully is what the exporter's pool and scheduling depend on: real TCP
// on real sockets, a real SSH handshake and authentication, and libvirt's wire protocol. Its
// faults are real at the socket level too:
//   - Silent: TCP is accepted (by the kernel and the server) and nothing is ever said: the
//     client's SSH handshake waits for a version string that never comes.
//   - Dropping: the listening socket's accept queue is kept full, so the kernel drops every
//     SYN: the client's TCP connect hangs, as with a host behind a DROP rule.
//   - Slow: every RPC is answered after a delay (SetRPCDelay), the SSH handshake of a new
//     connection starts late (SetSSHDelay), or a key offered for authentication is answered
//     late (SetAuthDelay).
//   - Refusing: nothing listens on the host's address: a connect is refused at once.
//   - PoolInactive, PoolInaccessible: SSH and libvirt answer, the storage pool is in that state.
//   - ReplaceHostKey: new connections see a new host key (known_hosts then mismatches).
//
// Counts.Varied makes a fleet that looks like a data centre's: hosts named
// hv-<rack>-<n>.<site>.example.net, each reporting that name as its hostname, and pools of
// varied sizes, so that every verdict's message is a host's own.
//
// SetRTT gives a host a network's round trip (and jitter): every reply of its SSH and libvirt
// sides reaches the client that much later, so that rounds cost what a network makes them cost.
package kvmstandin

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// Mode is how a stand-in host behaves for its whole life.
type Mode int

const (
	// Healthy answers SSH and libvirt.
	Healthy Mode = iota
	// Silent accepts TCP and never says anything.
	Silent
	// Dropping drops every SYN (its accept queue is full): connects hang.
	Dropping
	// Refusing has nothing listening: connects are refused.
	Refusing
	// PoolInactive answers SSH and libvirt; its storage pool is inactive.
	PoolInactive
	// PoolInaccessible answers SSH and libvirt; its storage pool is inaccessible.
	PoolInaccessible
)

func (m Mode) String() string {
	switch m {
	case Healthy:
		return "healthy"
	case Silent:
		return "silent"
	case Dropping:
		return "dropping"
	case Refusing:
		return "refusing"
	case PoolInactive:
		return "pool-inactive"
	case PoolInaccessible:
		return "pool-inaccessible"
	}
	return "mode " + strconv.Itoa(int(m))
}

// Socket is the libvirt socket path the stand-in hosts accept channels to; Pool is their
// storage pool's name; User the login name.
const (
	Socket = "/var/run/libvirt/libvirt-sock"
	Pool   = "default"
	User   = "root"
)

// Fleet is a set of stand-in hosts and the client credentials that reach them.
type Fleet struct {
	Hosts []*Host
	// ClientKeyPath is an unencrypted ed25519 private key every healthy host accepts.
	ClientKeyPath string
	// KnownHostsPath lists every host's key.
	KnownHostsPath string

	dir       string
	clientPub atomic.Pointer[ssh.PublicKey]
}

// Host is one stand-in host.
type Host struct {
	Name     string
	Hostname string
	// Addr is host:port on a loopback address of its own (127.77.x.y).
	Addr string
	Mode Mode
	Pool string
	// PoolCapacity and PoolAllocation are the sizes its pool reports, in bytes.
	PoolCapacity, PoolAllocation uint64

	fleet     *Fleet
	poolUUID  [16]byte
	hostKey   atomic.Pointer[ssh.Signer]
	rpcDelay  atomic.Int64
	sshDelay  atomic.Int64
	authDelay atomic.Int64
	rtt       atomic.Int64
	jitter    atomic.Int64

	ln      net.Listener // healthy, silent
	dropFD  int          // dropping: the listening socket, never accepted from
	filler  net.Conn     // dropping: the connection that keeps the accept queue full
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	auths   atomic.Int64
	rpcs    atomic.Int64
	accepts atomic.Int64
}

// Counts says how many hosts of each mode Start makes; hosts are numbered in this order.
type Counts struct {
	Healthy, Silent, Dropping, Refusing, PoolInactive, PoolInaccessible int
	// Varied names the hosts as a data centre does and varies their pools' sizes (see the
	// package's comment); otherwise host i is standin-i with a pool of PoolCapacity.
	Varied bool
	// First is the number of the fleet's first host: fleets whose numbers do not overlap (one
	// from 0, one from 8,000, ...) have distinct names and addresses, so that several
	// processes (kvmstandin's command: each within its limit of open files) make one larger
	// fleet.
	First int
}

// Total is the number of hosts c asks for.
func (c Counts) Total() int {
	return c.Healthy + c.Silent + c.Dropping + c.Refusing + c.PoolInactive + c.PoolInaccessible
}

// Start starts the hosts and stops them in tb's cleanup.
func Start(tb testing.TB, c Counts) *Fleet {
	tb.Helper()
	f, err := New(tb.TempDir(), c)
	if err != nil {
		tb.Fatalf("kvmstandin: %v", err)
	}
	tb.Cleanup(f.Close)
	return f
}

// New starts the hosts, keeping their client key and known_hosts in dir; Close stops them.
func New(dir string, c Counts) (*Fleet, error) {
	f := &Fleet{dir: dir}
	f.ClientKeyPath = filepath.Join(f.dir, "id_ed25519")
	f.KnownHostsPath = filepath.Join(f.dir, "known_hosts")
	if err := f.RotateClientKey(); err != nil {
		return nil, err
	}
	var modes []Mode
	// Counts' fields in the order of the modes' values.
	for m, k := range []int{c.Healthy, c.Silent, c.Dropping, c.Refusing, c.PoolInactive, c.PoolInaccessible} {
		for range k {
			modes = append(modes, Mode(m))
		}
	}
	if c.First < 0 || c.First+len(modes) > 250*250 {
		return nil, fmt.Errorf("hosts %d to %d asked for, at most %d are possible", c.First, c.First+len(modes)-1, 250*250)
	}
	var known []byte
	for i, m := range modes {
		h, err := f.startHost(c.First+i, m, c.Varied)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("start host %d (%s): %w", c.First+i, m, err)
		}
		f.Hosts = append(f.Hosts, h)
		known = append(known, knownhosts.Line([]string{knownhosts.Normalize(h.Addr)}, (*h.hostKey.Load()).PublicKey())...)
		known = append(known, '\n')
	}
	if err := os.WriteFile(f.KnownHostsPath, known, 0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// RotateClientKey writes a new client key to ClientKeyPath (replacing the file, as a Secret
// update does) and makes the hosts accept only the new one from now on.
func (f *Fleet) RotateClientKey() error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(priv, "kvmstandin client")
	if err != nil {
		return err
	}
	tmp := f.ClientKeyPath + ".new"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, f.ClientKeyPath); err != nil {
		return err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	f.clientPub.Store(&sp)
	return nil
}

// KVMConfig is the fleet as a kvm provider block.
func (f *Fleet) KVMConfig() testenv.KVMBlock {
	c := kvmConfig(f.ClientKeyPath, f.KnownHostsPath)
	for _, h := range f.Hosts {
		c.Hosts = append(c.Hosts, testenv.KVMTarget{Address: h.Addr, Name: h.Name})
	}
	return c
}

// kvmConfig is a kvm provider block with no hosts.
func kvmConfig(key, knownHosts string) testenv.KVMBlock {
	return testenv.KVMBlock{User: User, PrivateKeyFile: key, KnownHostsFile: knownHosts, Socket: Socket, StoragePool: Pool}
}

// Authentications counts the SSH logins every host of the fleet accepted (one per new link).
func (f *Fleet) Authentications() int64 {
	var n int64
	for _, h := range f.Hosts {
		n += h.Authentications()
	}
	return n
}

// Close stops every host.
func (f *Fleet) Close() {
	for _, h := range f.Hosts {
		h.stop()
	}
}

// loopback returns the i-th loopback address of the stand-in: 127.77.x.y, y in 1-250.
func loopback(i int) string {
	return fmt.Sprintf("127.77.%d.%d", i/250, i%250+1)
}

// sites are the cities a Varied fleet's data centres are named after (fra1, ams1, ..., fra2, ...).
var sites = []string{"fra", "ams", "par", "waw", "lon", "mad", "sto"}

// variedName is host i's name in a Varied fleet: hv-r<rack>-<n>.<site>.example.net, 24 hosts a
// rack, 40 racks a site; every name is a host's own.
func variedName(i int) string {
	site := i / (24 * 40)
	return fmt.Sprintf("hv-r%02d-%02d.%s%d.example.net", i/24%40+1, i%24+1, sites[site%len(sites)], site/len(sites)+1)
}

// variedPool is host i's pool in a Varied fleet: one of a few disk sizes, 3% to 96% allocated.
func variedPool(i int) (capacity, allocation uint64) {
	sizes := []uint64{480 << 30, 960 << 30, 1920 << 30, 3840 << 30, 7680 << 30}
	capacity = sizes[(i*7)%len(sizes)] - uint64(i%1000)<<20
	return capacity, capacity / 100 * uint64(3+(i*37)%94)
}

func (f *Fleet) startHost(i int, m Mode, varied bool) (*Host, error) {
	name := "standin-" + strconv.Itoa(i)
	hostname := name + ".kvmstandin.test"
	var capacity, allocation uint64 = PoolCapacity, PoolAllocation
	if varied {
		name = variedName(i)
		hostname = name
		capacity, allocation = variedPool(i)
	}
	h := &Host{Name: name, Hostname: hostname, Mode: m, Pool: Pool, PoolCapacity: capacity, PoolAllocation: allocation,
		fleet: f, conns: map[net.Conn]struct{}{}, dropFD: -1}
	copy(h.poolUUID[:], name)
	if err := h.ReplaceHostKey(); err != nil {
		return nil, err
	}
	ip := loopback(i)
	switch m {
	case Dropping:
		return h, h.listenDropping(ip)
	case Refusing:
		// A port taken and given back: nothing listens there, and no other host is ever
		// given this address.
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
		h.Addr = ln.Addr().String()
		return h, ln.Close()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	h.ln, h.Addr = ln, ln.Addr().String()
	h.wg.Go(h.acceptLoop)
	return h, nil
}

// listenDropping makes a listening socket with an accept queue of one and fills it: from then
// on the kernel drops the SYNs of every new connection, and a connect hangs until its caller
// gives up.
func (h *Host) listenDropping(ip string) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	addr := &syscall.SockaddrInet4{}
	copy(addr.Addr[:], net.ParseIP(ip).To4())
	if err := syscall.Bind(fd, addr); err != nil {
		syscall.Close(fd)
		return err
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		return err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return err
	}
	h.dropFD = fd
	h.Addr = net.JoinHostPort(ip, strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Backlog 0 holds one established connection: this one.
	c, err := net.DialTimeout("tcp", h.Addr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("fill the accept queue: %w", err)
	}
	h.filler = c
	return nil
}

// ReplaceHostKey gives the host a new ed25519 host key for new connections. The fleet's
// known_hosts is not changed: dials then fail with a host key mismatch.
func (h *Host) ReplaceHostKey() error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	h.hostKey.Store(&s)
	return nil
}

// SetRPCDelay makes the host answer every libvirt call d late (0: at once).
func (h *Host) SetRPCDelay(d time.Duration) { h.rpcDelay.Store(int64(d)) }

// SetSSHDelay makes the host start the SSH handshake of each new connection d after accepting
// it (0: at once), as an overloaded sshd does.
func (h *Host) SetSSHDelay(d time.Duration) { h.sshDelay.Store(int64(d)) }

// SetAuthDelay makes the host answer each public key offered for authentication d late (0: at
// once), as an sshd waiting on a slow user database or home directory does.
func (h *Host) SetAuthDelay(d time.Duration) { h.authDelay.Store(int64(d)) }

// Authentications counts the SSH logins the host accepted.
func (h *Host) Authentications() int64 { return h.auths.Load() }

// RPCs counts the libvirt calls the host received.
func (h *Host) RPCs() int64 { return h.rpcs.Load() }

// Accepted counts the TCP connections the host's server accepted.
func (h *Host) Accepted() int64 { return h.accepts.Load() }

// CloseConnections closes every connection of the host (as an sshd crash would); the
// listener keeps running.
func (h *Host) CloseConnections() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		c.Close()
	}
}

func (h *Host) track(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *Host) untrack(c net.Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

func (h *Host) acceptLoop() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.accepts.Add(1)
		if !h.track(c) {
			c.Close()
			return
		}
		if h.Mode == Silent {
			continue // held open, never answered, closed at stop
		}
		h.wg.Go(func() {
			defer h.untrack(c)
			defer c.Close()
			if d := time.Duration(h.sshDelay.Load()); d > 0 {
				time.Sleep(d)
			}
			h.serveSSH(&delayedConn{Conn: c, h: h})
		})
	}
}

func (h *Host) serveSSH(c net.Conn) {
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if d := time.Duration(h.authDelay.Load()); d > 0 {
				time.Sleep(d)
			}
			want := h.fleet.clientPub.Load()
			if meta.User() == User && want != nil && string(key.Marshal()) == string((*want).Marshal()) {
				return nil, nil
			}
			return nil, errors.New("key not authorized")
		},
		ServerVersion: "SSH-2.0-kvmstandin",
	}
	cfg.AddHostKey(*h.hostKey.Load())
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	h.auths.Add(1)
	defer conn.Close()
	h.wg.Go(func() {
		for r := range reqs {
			if r.WantReply {
				r.Reply(false, nil) // as OpenSSH answers keepalive@openssh.com
			}
		}
	})
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			nc.Reject(ssh.UnknownChannelType, "the stand-in opens only the libvirt socket")
			continue
		}
		var req struct {
			Path      string
			Reserved0 string
			Reserved1 uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &req); err != nil || req.Path != Socket {
			nc.Reject(ssh.ConnectionFailed, "connect failed: No such file or directory")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go ssh.DiscardRequests(creqs)
		h.wg.Go(func() { h.serveLibvirt(ch) })
	}
}

func (h *Host) stop() {
	h.mu.Lock()
	h.closed = true
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	if h.ln != nil {
		h.ln.Close()
	}
	if h.filler != nil {
		h.filler.Close()
	}
	if h.dropFD >= 0 {
		syscall.Close(h.dropFD)
	}
	h.wg.Wait()
}
