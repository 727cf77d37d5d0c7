package kvmstandin_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/hostpool"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
)

// TestStandIn checks each knob of the stand-in against a real client: the pool dials a healthy
// host and its libvirt answers; a silent host accepts TCP and never speaks; a dropping host's
// connect hangs (no refusal); a slow host's calls outlast a short deadline; a replaced host key
// no longer matches known_hosts; a rotated client key is the only one accepted.
func TestStandIn(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 2, Silent: 1, Dropping: 1})
	healthy, slow, silent, dropping := f.Hosts[0], f.Hosts[1], f.Hosts[2], f.Hosts[3]
	newPool := func() *hostpool.Pool {
		p := hostpool.New(hostpool.Options{Name: "standin-test", User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath,
			KnownHostsFile: f.KnownHostsPath, Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour,
			// Bounds a healthy host meets on a loaded machine; the silent and dropping hosts outlast them.
			TCPTimeout: 2 * time.Second, SSHTimeout: 2 * time.Second, LibvirtTimeout: 2 * time.Second})
		t.Cleanup(func() { p.Close() })
		return p
	}
	p := newPool()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var name string
	var info struct {
		state    uint8
		capacity uint64
	}
	err := p.Probe(ctx, healthy.Addr, func(l *libvirt.Libvirt) error {
		var err error
		if name, err = l.ConnectGetHostname(); err != nil {
			return err
		}
		pool, err := l.StoragePoolLookupByName(kvmstandin.Pool)
		if err != nil {
			return err
		}
		info.state, info.capacity, _, _, err = l.StoragePoolGetInfo(pool)
		return err
	})
	if err != nil || name != healthy.Hostname || info.state != uint8(libvirt.StoragePoolRunning) || info.capacity != kvmstandin.PoolCapacity {
		t.Errorf("healthy host: %v, hostname %q, pool %+v; want %s, running, %d bytes", err, name, info, healthy.Hostname, kvmstandin.PoolCapacity)
	}
	var le libvirt.Error
	err = p.Probe(ctx, healthy.Addr, func(l *libvirt.Libvirt) error {
		_, err := l.StoragePoolLookupByName("absent")
		return err
	})
	if !errors.As(err, &le) || le.Code != uint32(libvirt.ErrNoStoragePool) {
		t.Errorf("lookup of a missing pool: %v, want libvirt's no-storage-pool error", err)
	}

	// Connected first: the delay then applies to the check's calls, not to the dial.
	if err := p.Probe(ctx, slow.Addr, func(l *libvirt.Libvirt) error { _, err := l.ConnectGetLibVersion(); return err }); err != nil {
		t.Fatalf("slow host before the delay: %v", err)
	}
	slow.SetRPCDelay(2 * time.Second)
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	err = p.Probe(short, slow.Addr, func(l *libvirt.Libvirt) error { _, err := l.ConnectGetLibVersion(); return err })
	cancelShort()
	if !errors.Is(err, hostpool.ErrProbeAbandoned) {
		t.Errorf("slow host: %v, want the probe abandoned at its deadline", err)
	}
	slow.SetRPCDelay(0)

	_, _, err = p.Acquire(ctx, silent.Addr)
	var de *hostpool.DialError
	if !errors.As(err, &de) || de.Stage != hostpool.StageSSHHandshake || !de.BoundExpired() || silent.Accepted() != 1 {
		t.Errorf("silent host: %v (accepted %d), want the ssh handshake's bound expired after an accepted connection", err, silent.Accepted())
	}
	_, _, err = p.Acquire(ctx, dropping.Addr)
	if !errors.As(err, &de) || de.Stage != hostpool.StageTCP || !de.BoundExpired() {
		t.Errorf("dropping host: %v, want the tcp connect's bound expired (not refused)", err)
	}
	if _, err := net.DialTimeout("tcp", dropping.Addr, 200*time.Millisecond); err == nil {
		t.Error("a plain connect to the dropping host succeeded")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("a plain connect to the dropping host: %v, want a timeout", err)
	}

	// A new host key: a fresh pool's dial fails the host key check as a mismatch.
	if err := healthy.ReplaceHostKey(); err != nil {
		t.Fatal(err)
	}
	_, _, err = newPool().Acquire(ctx, healthy.Addr)
	var ke *knownhosts.KeyError
	if !errors.As(err, &de) || de.Stage != hostpool.StageHostKey || !errors.As(err, &ke) || len(ke.Want) == 0 {
		t.Errorf("after ReplaceHostKey: %v, want a host key mismatch", err)
	}

	// A rotated client key: the new file logs in, and the old key (still in memory of a
	// pool made before, with its link cut) no longer does.
	logins := slow.Authentications()
	if err := f.RotateClientKey(); err != nil {
		t.Fatal(err)
	}
	c, release, err := newPool().Acquire(ctx, slow.Addr)
	if err != nil {
		t.Fatalf("with the rotated key: %v", err)
	}
	release()
	if c.Libvirt() == nil || slow.Authentications() != logins+1 {
		t.Errorf("rotated key: %d logins, want %d", slow.Authentications(), logins+1)
	}
}

// TestStandInRTT: with a round trip set, every libvirt call on a live link takes at least that
// round trip; calls in flight together on one link all get their own replies through the
// delay queue (in order, whatever the jitter); turning it off leaves the link working. Only
// lower bounds of time are asserted: a reply cannot arrive early.
func TestStandInRTT(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 1})
	h := f.Hosts[0]
	p := hostpool.New(hostpool.Options{Name: "standin-rtt", User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath,
		KnownHostsFile: f.KnownHostsPath, Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour,
		TCPTimeout: 5 * time.Second, SSHTimeout: 5 * time.Second, LibvirtTimeout: 5 * time.Second})
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func() (time.Duration, error) {
		start := time.Now()
		err := p.Probe(ctx, h.Addr, func(l *libvirt.Libvirt) error { _, err := l.ConnectGetLibVersion(); return err })
		return time.Since(start), err
	}
	if _, err := call(); err != nil { // the link, without delay
		t.Fatal(err)
	}
	const rtt = 80 * time.Millisecond
	f.SetRTT(rtt, 10*time.Millisecond)
	for range 3 {
		if d, err := call(); err != nil || d < rtt-10*time.Millisecond {
			t.Errorf("a call with a %v round trip: %v after %v, want at least %v", rtt, err, d, rtt-10*time.Millisecond)
		}
	}
	// Four calls in flight on the one link: each reply reaches its caller.
	start := time.Now()
	err := p.Probe(ctx, h.Addr, func(l *libvirt.Libvirt) error {
		errs := make(chan error, 4)
		for range 4 {
			go func() { _, err := l.ConnectGetLibVersion(); errs <- err }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	})
	if d := time.Since(start); err != nil || d < rtt-10*time.Millisecond {
		t.Errorf("four calls in flight: %v after %v, want at least one round trip", err, d)
	}
	f.SetRTT(0, 0)
	if _, err := call(); err != nil {
		t.Errorf("after the round trip is turned off: %v", err)
	}
}

// TestVariedFleet checks the modes and names a realistic fleet is made of: each host has a name
// of its own, which it reports as its hostname; healthy hosts' pools differ in size; a refusing
// host refuses the connect; the pool hosts answer libvirt with their pool inactive or
// inaccessible.
func TestVariedFleet(t *testing.T) {
	f := kvmstandin.Start(t, kvmstandin.Counts{Healthy: 2, Refusing: 1, PoolInactive: 1, PoolInaccessible: 1, Varied: true})
	p := hostpool.New(hostpool.Options{Name: "standin-varied", User: kvmstandin.User, PrivateKeyFile: f.ClientKeyPath,
		KnownHostsFile: f.KnownHostsPath, Socket: kvmstandin.Socket, KeepaliveInterval: time.Hour,
		TCPTimeout: 5 * time.Second, SSHTimeout: 5 * time.Second, LibvirtTimeout: 5 * time.Second})
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	names := map[string]bool{}
	capacities := map[uint64]bool{}
	for _, h := range f.Hosts {
		if names[h.Name] || !strings.HasPrefix(h.Name, "hv-r") || !strings.HasSuffix(h.Name, ".example.net") {
			t.Errorf("host name %q: want a name of its own, hv-r<rack>-<n>.<site>.example.net", h.Name)
		}
		names[h.Name] = true
		if h.Mode == kvmstandin.Refusing {
			_, _, err := p.Acquire(ctx, h.Addr)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("refusing host: %v, want the connect refused", err)
			}
			continue
		}
		var hostname string
		var state uint8
		var capacity uint64
		err := p.Probe(ctx, h.Addr, func(l *libvirt.Libvirt) error {
			var err error
			if hostname, err = l.ConnectGetHostname(); err != nil {
				return err
			}
			pool, err := l.StoragePoolLookupByName(kvmstandin.Pool)
			if err != nil {
				return err
			}
			state, capacity, _, _, err = l.StoragePoolGetInfo(pool)
			return err
		})
		want := map[kvmstandin.Mode]libvirt.StoragePoolState{kvmstandin.Healthy: libvirt.StoragePoolRunning,
			kvmstandin.PoolInactive: libvirt.StoragePoolInactive, kvmstandin.PoolInaccessible: libvirt.StoragePoolInaccessible}[h.Mode]
		if err != nil || hostname != h.Name || state != uint8(want) {
			t.Errorf("%s host %s: %v, hostname %q, pool state %d; want its name and state %d", h.Mode, h.Name, err, hostname, state, want)
		}
		if h.Mode == kvmstandin.Healthy {
			if capacity != h.PoolCapacity {
				t.Errorf("%s: capacity %d, want %d", h.Name, capacity, h.PoolCapacity)
			}
			capacities[capacity] = true
		}
	}
	if len(capacities) != 2 {
		t.Errorf("the healthy hosts' pools: capacities %v, want two sizes", capacities)
	}
}
