package checkertest

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

func TestProvidersFileKeepsTheBlocksIndentation(t *testing.T) {
	r := &run{h: Harness{Type: "kvm"}}
	got := r.providersFile("\n\t\n    user: root\n    hosts:\n      - {address: a}\n\n")
	want := "providers:\n  - name: conformance\n    type: kvm\n    kvm:\n" +
		"      user: root\n      hosts:\n        - {address: a}\n"
	if got != want {
		t.Errorf("providersFile:\n%s\nwant:\n%s", got, want)
	}
	// The file is YAML the loader reads up to the type (not registered in this package).
	_, err := config.Parse("/p.yml", []byte(got))
	if err == nil || !strings.Contains(err.Error(), "kvm") {
		t.Errorf("config.Parse: %v, want the unknown type named", err)
	}
}

func TestGoroutinesSeesANewOne(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	go func() { <-stop }()
	defer close(stop)
	var fresh []string
	for id, stack := range goroutines() {
		if _, old := before[id]; !old {
			fresh = append(fresh, stack)
		}
	}
	if len(fresh) != 1 || !strings.Contains(fresh[0], "TestGoroutinesSeesANewOne") {
		t.Fatalf("new goroutines: %q, want the one started by the test", fresh)
	}
	own := false
	for _, stack := range before {
		own = own || strings.Contains(stack, "TestGoroutinesSeesANewOne")
	}
	if !own {
		t.Error("the test's own goroutine is not in the first count")
	}
	if serverSide(fresh[0]) {
		t.Error("a test goroutine taken for a server's")
	}
}

// TestSYNDroppedEndpointHangsAConnect proves on this machine what the SYN-dropped endpoint
// relies on: with its accept queue full, a connect to it is neither refused nor completed, its
// socket stays in SYN_SENT (what the Abandoned subtest watches for), and only the connect's
// own deadline ends it.
func TestSYNDroppedEndpointHangsAConnect(t *testing.T) {
	e := startSYNDropped(t)
	if e.reached() {
		t.Fatal("a socket is connecting to the endpoint before anything dialled it")
	}
	const wait = time.Second
	dialled := make(chan error, 1)
	start := time.Now()
	go func() {
		conn, err := net.DialTimeout("tcp", e.addr, wait)
		if err == nil {
			conn.Close()
		}
		dialled <- err
	}()
	for !e.reached() {
		if time.Since(start) > wait {
			t.Fatal("no socket in SYN_SENT to the endpoint while a connect to it waits")
		}
		time.Sleep(time.Millisecond)
	}
	err := <-dialled
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the connect ended with %v after %v, want its own timeout (%v)", err, time.Since(start), wait)
	}
	if elapsed := time.Since(start); elapsed < wait {
		t.Errorf("the connect timed out after %v, before its %v", elapsed, wait)
	}
	if n, err := acceptQueue(e.addr); err != nil || n != 1 {
		t.Errorf("the accept queue holds %d connection(s) (%v), want the kit's one", n, err)
	}
}

// TestSilentEndpointAcceptsAndSaysNothing: a connect to the silent endpoint completes, the
// endpoint sees it, and nothing is ever read from it.
func TestSilentEndpointAcceptsAndSaysNothing(t *testing.T) {
	e := startSilent(t)
	conn, err := net.DialTimeout("tcp", e.addr, grace)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for start := time.Now(); !e.reached(); time.Sleep(time.Millisecond) {
		if time.Since(start) > grace {
			t.Fatal("the endpoint did not see the connection")
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read %d byte(s), %v; want nothing until the deadline", n, err)
	}
}
