package kvmhost

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ConfigureSSHD restarts the host's sshd (starting it if it was stopped) with directives placed
// ahead of the host's own configuration, so that they win: sshd keeps the first value it reads
// of a keyword. Examples: "PubkeyAuthentication no"; "PasswordAuthentication yes",
// "AuthenticationMethods password". No Match blocks. The configuration is checked with sshd -t.
// Established connections stay, as when an administrator reloads sshd. A later call replaces
// the directives of an earlier one; none restores the host's configuration.
func (h *Host) ConfigureSSHD(directives ...string) {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		h.sshdExtra = slices.Clone(directives)
		if len(directives) == 0 {
			h.sshdExtra = nil
		}
		return h.restartSSHD(ctx)
	})
}

// ServeHostKeyTypes restarts the host's sshd serving only its host keys of the given types
// ("ed25519", "ecdsa", "rsa"), as a host reconfigured or reinstalled with fewer key types, or an
// impostor holding other keys, would: a client offering only the other types fails in algorithm
// negotiation. HostKeys and the fleet's known_hosts still list every key. None serves every type
// again.
func (h *Host) ServeHostKeyTypes(types ...string) {
	h.tb.Helper()
	for _, kt := range types {
		if !slices.Contains(hostKeyTypes, kt) {
			h.fatal(fmt.Errorf("unknown host key type %q (have %v)", kt, hostKeyTypes))
		}
	}
	h.do(func(ctx context.Context) error {
		h.servedKeys = slices.Clone(types)
		if len(types) == 0 {
			h.servedKeys = nil
		}
		return h.restartSSHD(ctx)
	})
}

// restartSSHD writes sshd_config again and restarts sshd. The caller holds h.mu.
func (h *Host) restartSSHD(ctx context.Context) error {
	if err := h.writeSSHDConfig(ctx); err != nil {
		return err
	}
	h.sshd.Stop(syscall.SIGTERM, stopGrace)
	return h.startSSHD()
}

// DelayUserauth makes the host's sshd slow at authentication, as a host whose account or name
// lookups go to a slow LDAP or DNS server is: with UseDNS yes, sshd looks up the client's name
// when the first authentication request arrives (the "none" request, before any key is tried),
// and the host's resolver is a server of the test that answers (with NXDOMAIN) only after d.
// The handshake and the host key exchange are not delayed. It restarts sshd on the first call;
// later calls change the delay only. See NameLookups.
func (h *Host) DelayUserauth(d time.Duration) {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		if h.dns != nil {
			h.dns.delay.Store(int64(d))
			return nil
		}
		dns, err := startSlowDNS(net.JoinHostPort(h.outside.String(), "53"))
		if err != nil {
			return err
		}
		dns.delay.Store(int64(d))
		h.dns = dns
		// timeout:30: the resolver waits for the server's answer however long the test delays it.
		conf := filepath.Join(h.Dir, "resolv.conf")
		if err := os.WriteFile(conf, []byte("nameserver "+h.outside.String()+"\noptions timeout:30 attempts:1\n"), 0o644); err != nil {
			return fmt.Errorf("write resolv.conf: %w", err)
		}
		if _, err := run(ctx, "", "nsenter", h.nsenterArgs(true, "mount", "--bind", conf, "/etc/resolv.conf")...); err != nil {
			return fmt.Errorf("give the host its resolver: %w", err)
		}
		h.sshdExtra = append(slices.DeleteFunc(h.sshdExtra, func(s string) bool {
			return strings.HasPrefix(strings.ToLower(s), "usedns ")
		}), "UseDNS yes")
		return h.restartSSHD(ctx)
	})
}

// NameLookups counts the DNS queries the host's resolver received since DelayUserauth.
func (h *Host) NameLookups() int {
	h.tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dns == nil {
		return 0
	}
	return int(h.dns.queries.Load())
}

// KillSSHConnectionsUnnoticed kills the host's per-connection sshd processes as
// KillSSHConnections does, but the clients are not told: the FIN the host's kernel sends for
// each connection is dropped (an iptables rule in the host's namespace matching only those
// connections), as when a host's sshd dies while the network loses the end of the connection.
// A client learns of it only when it next sends on the connection, which the host answers with
// a reset.
func (h *Host) KillSSHConnectionsUnnoticed() {
	h.tb.Helper()
	h.do(func(ctx context.Context) error {
		peers, err := tcpPeers(h.holder.PID(), tcpEstablished, 22)
		if err != nil {
			return err
		}
		for _, p := range peers {
			rule := []string{"iptables", "-w", "-I", "OUTPUT", "-o", hostIfName, "-p", "tcp", "--sport", "22",
				"-d", p.Addr().String(), "--dport", strconv.Itoa(int(p.Port())), "--tcp-flags", "FIN", "FIN", "-j", "DROP"}
			if _, err := run(ctx, "", "nsenter", h.nsenterArgs(false, rule...)...); err != nil {
				return fmt.Errorf("hide the end of the connection from %s: %w", p, err)
			}
		}
		return h.killSSHConnections()
	})
}

// tcpPeers lists the remote ends of the IPv4 sockets of pid's network namespace that are in state
// and bound to localPort.
func tcpPeers(pid int, state uint64, localPort uint16) ([]netip.AddrPort, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", "tcp"))
	if err != nil {
		return nil, fmt.Errorf("read sockets: %w", err)
	}
	defer f.Close()
	var peers []netip.AddrPort
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		local, err1 := parseHexAddr(fields[1])
		remote, err2 := parseHexAddr(fields[2])
		st, err3 := strconv.ParseUint(fields[3], 16, 8)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("parse socket row %q", sc.Text())
		}
		if st == state && local.Port() == localPort {
			peers = append(peers, remote)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read sockets: %w", err)
	}
	return peers, nil
}

// slowDNS is a DNS server that answers every query with NXDOMAIN after a delay.
type slowDNS struct {
	conn    *net.UDPConn
	delay   atomic.Int64 // time.Duration
	queries atomic.Int64
	done    chan struct{}
	wg      sync.WaitGroup
}

func startSlowDNS(addr string) (*slowDNS, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("resolver address: %w", err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("start the host's resolver: %w", err)
	}
	s := &slowDNS{conn: conn, done: make(chan struct{})}
	s.wg.Go(s.serve)
	return s, nil
}

func (s *slowDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		reply, ok := nxdomain(buf[:n])
		if !ok {
			continue
		}
		s.queries.Add(1)
		delay := time.Duration(s.delay.Load())
		s.wg.Go(func() {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
				s.conn.WriteToUDP(reply, from)
			case <-s.done:
			}
		})
	}
}

func (s *slowDNS) close() {
	close(s.done)
	s.conn.Close()
	s.wg.Wait()
}

// nxdomain builds the NXDOMAIN answer to query: its header and question, no records.
func nxdomain(query []byte) ([]byte, bool) {
	const header = 12
	if len(query) < header || query[4] != 0 || query[5] != 1 { // exactly one question
		return nil, false
	}
	i := header
	for i < len(query) && query[i] != 0 {
		i += 1 + int(query[i])
	}
	end := i + 1 + 4 // the root label, type and class
	if end > len(query) {
		return nil, false
	}
	reply := append([]byte(nil), query[:end]...)
	reply[2] = 0x80 | query[2]&0x79 // a response; opcode and recursion desired as asked
	reply[3] = 0x80 | 3             // recursion available; NXDOMAIN
	clear(reply[6:header])          // no answer, authority or additional records
	return reply, true
}

// parseHexAddr reads an IPv4 address of /proc/net/tcp: "0200A8C0:0016", the address as the
// kernel's 32-bit word in this machine's byte order, then the port.
func parseHexAddr(s string) (netip.AddrPort, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(ipHex)
	if !ok || err != nil || len(raw) != 4 {
		return netip.AddrPort{}, fmt.Errorf("unexpected address %q", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("unexpected port in %q: %w", s, err)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], binary.BigEndian.Uint32(raw))
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(port)), nil
}
