package kvmstandin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// RemoteFleet is a fleet served by the kvmstandin command in a process of its own
// (StartProcess): what this process needs to reach it.
type RemoteFleet struct {
	Hosts          []RemoteHost
	ClientKeyPath  string
	KnownHostsPath string
	// Control is the command's control endpoint, host:port.
	Control string
}

// RemoteHost is one host of a RemoteFleet.
type RemoteHost struct {
	Name, Addr string
	Mode       Mode
}

// RemoteCounts sums what the hosts of a remote fleet received.
type RemoteCounts struct {
	Authentications, RPCs, Accepted int64
}

// Sub is c minus d, field by field.
func (c RemoteCounts) Sub(d RemoteCounts) RemoteCounts {
	return RemoteCounts{c.Authentications - d.Authentications, c.RPCs - d.RPCs, c.Accepted - d.Accepted}
}

// Add is c plus d, field by field.
func (c RemoteCounts) Add(d RemoteCounts) RemoteCounts {
	return RemoteCounts{c.Authentications + d.Authentications, c.RPCs + d.RPCs, c.Accepted + d.Accepted}
}

// StartProcess builds the kvmstandin command and runs it with the hosts of c, every one at
// round trip rtt (give or take jitter), until tb's cleanup. Every goroutine, byte and file
// descriptor of the hosts is then the other process's. Under -short it skips the test.
func StartProcess(tb testing.TB, c Counts, rtt, jitter time.Duration) *RemoteFleet {
	tb.Helper()
	testenv.SkipIfShort(tb, "builds the kvmstandin command with go build and runs it")
	dir := tb.TempDir()
	bin := filepath.Join(dir, "kvmstandin")
	build := exec.Command("go", "build", "-o", bin, "github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmstandin/cmd/kvmstandin")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("kvmstandin: build the command: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-dir", dir, fmt.Sprintf("-healthy=%d", c.Healthy), fmt.Sprintf("-silent=%d", c.Silent),
		fmt.Sprintf("-dropping=%d", c.Dropping), fmt.Sprintf("-refusing=%d", c.Refusing),
		fmt.Sprintf("-pool-inactive=%d", c.PoolInactive), fmt.Sprintf("-pool-inaccessible=%d", c.PoolInaccessible),
		fmt.Sprintf("-varied=%t", c.Varied), fmt.Sprintf("-first=%d", c.First), "-rtt="+rtt.String(), "-jitter="+jitter.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("kvmstandin: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		tb.Fatalf("kvmstandin: the command did not get ready: %q, %v", line, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "fleet.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var f RemoteFleet
	if err := json.Unmarshal(b, &f); err != nil {
		tb.Fatal(err)
	}
	return &f
}

// KVMConfig is the fleet as a kvm provider block, with the loader's defaults.
func (f *RemoteFleet) KVMConfig() testenv.KVMBlock {
	c := kvmConfig(f.ClientKeyPath, f.KnownHostsPath)
	for _, h := range f.Hosts {
		c.Hosts = append(c.Hosts, testenv.KVMTarget{Address: h.Addr, Name: h.Name})
	}
	return c
}

// Counts asks the command what its hosts received so far.
func (f *RemoteFleet) Counts(tb testing.TB) RemoteCounts {
	tb.Helper()
	resp, err := http.Get("http://" + f.Control + "/counts")
	if err != nil {
		tb.Fatalf("kvmstandin: counts: %v", err)
	}
	defer resp.Body.Close()
	var n RemoteCounts
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		tb.Fatalf("kvmstandin: counts: %v", err)
	}
	return n
}

// SetRTT sets every host's round trip and jitter (Host.SetRTT).
func (f *RemoteFleet) SetRTT(tb testing.TB, rtt, jitter time.Duration) {
	tb.Helper()
	resp, err := http.PostForm("http://"+f.Control+"/rtt?"+url.Values{"rtt": {rtt.String()}, "jitter": {jitter.String()}}.Encode(), nil)
	if err != nil {
		tb.Fatalf("kvmstandin: set rtt: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("kvmstandin: set rtt: %s", resp.Status)
	}
}
