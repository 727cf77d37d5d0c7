// Package testutil holds the small helpers the tests of several packages share: a buffer that
// log handlers and subprocesses may write to concurrently, a wait for a condition, a child
// process that dies with the test, a file replaced as inventories replace theirs, the series a
// gatherer holds for one label value, the repository's root (root.go) and docs/metrics.md's
// metric rows (metricsdoc.go), and (exporter.go) requests to a running exporter and readers of
// its answers and logs.
package testutil

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond every few milliseconds until it holds, and fails the test when timeout
// passes first, naming what it waited for.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	EventuallyEvery(tb, timeout, 5*time.Millisecond, what, cond)
}

// EventuallyEvery is Eventually, calling cond every poll: for a condition whose every call
// costs the processes it reads (a scrape of large /metrics answers), so that waiting does not
// load what it measures.
func EventuallyEvery(tb testing.TB, timeout, poll time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(poll)
	}
}

// Process is a child process started by StartProcess.
type Process struct {
	Cmd    *exec.Cmd
	waited chan error
	mu     sync.Mutex
	exited bool
	err    error
}

// StartProcess starts cmd so that it dies with the test: it is killed (SIGKILL) when the thread
// that started it ends (Pdeathsig; the start and the wait run on one goroutine locked to its
// thread, which lives exactly as long as the child) and at the test's cleanup.
func StartProcess(tb testing.TB, cmd *exec.Cmd) *Process {
	tb.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &Process{Cmd: cmd, waited: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		tb.Fatalf("starting %s: %v", cmd.Path, err)
	}
	tb.Cleanup(func() {
		if !p.Exited() {
			_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process would not die of SIGKILL's cleanup otherwise
			_ = cmd.Process.Kill()
			p.Wait()
		}
	})
	return p
}

// Exited reports whether the process has exited, without waiting.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return true
	}
	select {
	case p.err = <-p.waited:
		p.exited = true
	default:
	}
	return p.exited
}

// Wait waits for the process to exit and returns what cmd.Wait returned.
func (p *Process) Wait() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		p.err = <-p.waited
		p.exited = true
	}
	return p.err
}

// Series gathers g and returns the value of every series labelled label=value, keyed by its
// family's name, followed by the values of its other labels in braces when it has any (in label
// name order, comma-separated): "x_dials_total{ok}".
func Series(tb testing.TB, g prometheus.Gatherer, label, value string) map[string]float64 {
	tb.Helper()
	families, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var match bool
			var others []string
			for _, l := range m.GetLabel() { // sorted by name
				if l.GetName() == label {
					match = l.GetValue() == value
				} else {
					others = append(others, l.GetValue())
				}
			}
			if !match {
				continue
			}
			key := mf.GetName()
			if len(others) > 0 {
				key += "{" + strings.Join(others, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// ReplaceFile writes data to a new file renamed over path, as inventories are written: a new
// inode, so that a rewrite within the file system's timestamp granularity is still a change.
func ReplaceFile(t testing.TB, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// PeakHeap runs f and returns the most heap in use (runtime.MemStats.HeapInuse) sampled every
// 20ms while it ran: to show that a body that never ends does not grow the process.
func PeakHeap(t testing.TB, f func()) uint64 {
	t.Helper()
	var peak uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-sampled
	return peak
}

// EndlessBody is a handler that answers 200 with contentType, prefix, then a body that never
// ends, written as fast as the client reads it until it goes away: a broken or hostile
// endpoint, to show that an answer is read with a bound.
func EndlessBody(contentType, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, prefix)
		chunk := strings.Repeat("x", 64<<10)
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}
}
