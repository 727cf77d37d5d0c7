// Command kvmstandin serves a fleet of scale stand-in hosts (package kvmstandin) from a process
// of its own, so that a benchmark measuring the exporter's CPU, memory, goroutines and file
// descriptors counts the exporter's alone. It writes the fleet's description (hosts, client key,
// known_hosts, control address) to DIR/fleet.json, prints "ready" on standard output, and serves
// until SIGTERM or SIGINT. Its control endpoint, on loopback, answers GET /counts (the SSH logins,
// libvirt calls and TCP connections the hosts received) and POST /rtt?rtt=D&jitter=D.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin"
)

func main() {
	dir := flag.String("dir", "", "directory for the fleet's keys and fleet.json (required)")
	var c kvmstandin.Counts
	flag.IntVar(&c.Healthy, "healthy", 0, "healthy hosts")
	flag.IntVar(&c.Silent, "silent", 0, "hosts that accept TCP and never speak")
	flag.IntVar(&c.Dropping, "dropping", 0, "hosts whose connects hang")
	flag.IntVar(&c.Refusing, "refusing", 0, "hosts whose connects are refused")
	flag.IntVar(&c.PoolInactive, "pool-inactive", 0, "hosts whose storage pool is inactive")
	flag.IntVar(&c.PoolInaccessible, "pool-inaccessible", 0, "hosts whose storage pool is inaccessible")
	flag.BoolVar(&c.Varied, "varied", false, "name hosts as a data centre does and vary their pools' sizes")
	flag.IntVar(&c.First, "first", 0, "number of the first host (several processes with distinct ranges make one fleet)")
	rtt := flag.Duration("rtt", 0, "round trip of every host")
	jitter := flag.Duration("jitter", 0, "jitter of the round trip")
	flag.Parse()
	if *dir == "" {
		log.Fatal("kvmstandin: -dir is required")
	}
	if err := raiseFileLimit(c.Total()); err != nil {
		log.Fatalf("kvmstandin: %v", err)
	}
	f, err := kvmstandin.New(*dir, c)
	if err != nil {
		log.Fatalf("kvmstandin: %v", err)
	}
	defer f.Close()
	f.SetRTT(*rtt, *jitter)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("kvmstandin: control: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, _ *http.Request) {
		var n kvmstandin.RemoteCounts
		for _, h := range f.Hosts {
			n.Authentications += h.Authentications()
			n.RPCs += h.RPCs()
			n.Accepted += h.Accepted()
		}
		_ = json.NewEncoder(w).Encode(n)
	})
	mux.HandleFunc("POST /rtt", func(w http.ResponseWriter, r *http.Request) {
		rtt, err1 := time.ParseDuration(r.URL.Query().Get("rtt"))
		jitter, err2 := time.ParseDuration(r.URL.Query().Get("jitter"))
		if err1 != nil || err2 != nil {
			http.Error(w, "rtt and jitter must be durations", http.StatusBadRequest)
			return
		}
		f.SetRTT(rtt, jitter)
	})
	go func() { _ = http.Serve(ln, mux) }()

	desc := kvmstandin.RemoteFleet{ClientKeyPath: f.ClientKeyPath, KnownHostsPath: f.KnownHostsPath, Control: ln.Addr().String()}
	for _, h := range f.Hosts {
		desc.Hosts = append(desc.Hosts, kvmstandin.RemoteHost{Name: h.Name, Addr: h.Addr, Mode: h.Mode})
	}
	b, err := json.Marshal(desc)
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(*dir, "fleet.json")
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// raiseFileLimit raises this process's limit of open files (the hard limit too, which root may)
// to what a fleet of n hosts needs: a listening socket and a client's connection each, and room
// for the rest. A lower limit is left alone.
func raiseFileLimit(n int) error {
	need := uint64(2*n + 1024)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= need {
		return nil
	}
	lim.Cur, lim.Max = need, max(lim.Max, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("%d hosts need %d open files (RLIMIT_NOFILE); raising the limit: %w", n, need, err)
	}
	return nil
}
