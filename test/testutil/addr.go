package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
)

// FreeLoopbackAddr returns a 127.0.0.1 address, free a moment ago, for a daemon a test starts
// and tells where to listen. Its port lies outside the kernel's ephemeral range: a port found
// by listening on 127.0.0.1:0 comes from that range, and any outgoing connection of the machine
// (a client of another daemon, an SSH dial) may be given it before the daemon binds it. Two
// tests picking at random can still collide; the daemon then fails to bind, and says so.
func FreeLoopbackAddr() (string, error) {
	lo, hi := ephemeralRange()
	for range 200 {
		port := 1024 + rand.IntN(65536-1024)
		if port >= lo && port <= hi {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return "", fmt.Errorf("release picked port %s: %w", addr, err)
		}
		return addr, nil
	}
	return "", fmt.Errorf("no free loopback port outside the ephemeral range %d-%d", lo, hi)
}

// MustFreeLoopbackAddr is FreeLoopbackAddr for a test, failing it when no port is found.
func MustFreeLoopbackAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := FreeLoopbackAddr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

// ephemeralRange is the kernel's range for the local ports of outgoing connections, or Linux's
// default when it cannot be read.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var l, h int
	if n, _ := fmt.Sscan(string(b), &l, &h); n == 2 && l > 0 && h >= l {
		return l, h
	}
	return lo, hi
}
