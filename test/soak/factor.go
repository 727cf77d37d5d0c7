package soak

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// The soak's bounds are test-sized (DefaultOptions: 300 ms to connect, 700 ms for the SSH
// handshake and authentication, 2 s rounds), well under what the exporter's defaults give a
// real fleet, so that 80 rounds fit in make test. On a machine loaded enough that a healthy
// dial nears them, a healthy host would read down for the load, not for a fault: the bounds
// are therefore derived from a dial measured on the machine before the run (MachineFactor),
// never fixed below what it takes.
const (
	// dialSamples is how many dials MachineFactor measures; the slowest counts.
	dialSamples = 8
	// boundMargin is how many times the slowest measured dial the SSH bound must be.
	boundMargin = 5
	// maxFactor caps the factor (a 12 s round, 3.5 s SSH bound): a machine slower than that
	// runs the soak at that factor, and says so in the log.
	maxFactor = 6
)

// Scaled returns o with every duration the exporter bounds (the round's interval and
// deadline, the kvm provider's dial and RPC bounds) and Settle multiplied by f, and the
// mixin's Scale divided by it, so that the alert chain keeps its timing in rounds. f must
// divide Scale.
func (o Options) Scaled(f int) Options {
	if f <= 1 {
		o.Factor = 1
		return o
	}
	d := time.Duration(f)
	o.Interval *= d
	o.Timeout *= d
	o.TCPTimeout *= d
	o.SSHTimeout *= d
	o.LibvirtTimeout *= d
	o.RPCTimeout *= d
	o.Settle *= d
	o.Scale /= f
	o.Factor = f
	return o
}

// MachineFactor dials the fleet's first host dialSamples times as the kvm checker does (TCP,
// the SSH handshake with the host key checked against known_hosts, public-key authentication,
// a channel to libvirt's socket) and returns the smallest factor, from 1 to maxFactor and
// dividing scale, by which sshTimeout is at least boundMargin times the slowest dial; and that
// dial's duration.
func MachineFactor(fleet *kvmhost.Fleet, sshTimeout time.Duration, scale int) (int, time.Duration, error) {
	key, err := fileread.Read(fleet.ClientKeyPath, 64<<10) // an OpenSSH private key: a few hundred bytes
	if err != nil {
		return 0, 0, err
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		return 0, 0, err
	}
	hostKeys, err := knownhosts.New(fleet.KnownHostsPath)
	if err != nil {
		return 0, 0, err
	}
	h := fleet.Hosts[0]
	cfg := &ssh.ClientConfig{User: fleet.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hostKeys, Timeout: time.Minute}
	var took []time.Duration
	for range dialSamples {
		start := time.Now()
		if err := dialOnce(h.Addr, h.Socket, cfg); err != nil {
			return 0, 0, fmt.Errorf("dial %s: %w", h.Addr, err)
		}
		took = append(took, time.Since(start))
	}
	slowest := slices.Max(took)
	return pickFactor(slowest, sshTimeout, scale), slowest, nil
}

// pickFactor is the smallest factor from 1 to maxFactor dividing scale by which sshTimeout is
// at least boundMargin times slowest; the largest such divisor up to maxFactor when none is.
func pickFactor(slowest, sshTimeout time.Duration, scale int) int {
	best := 1
	for f := 1; f <= maxFactor; f++ {
		if scale%f != 0 {
			continue
		}
		best = f
		if sshTimeout*time.Duration(f) >= boundMargin*slowest {
			return f
		}
	}
	return best
}

func dialOnce(addr, socket string, cfg *ssh.ClientConfig) error {
	c, err := ssh.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	conn, err := c.Dial("unix", socket)
	if err != nil {
		return err
	}
	return conn.Close()
}
