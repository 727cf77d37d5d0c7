package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// hugeHostFile is the host file: about 16 MiB (the default --config.host-file-max-size)
// of short names in one group, about 1.5 M of them, YAML or JSON.
func hugeHostFile(json bool) string {
	var b strings.Builder
	const size = 16<<20 - 64
	if json {
		b.WriteString(`[{"targets": ["h0"`)
		for i := 1; b.Len() < size; i++ {
			fmt.Fprintf(&b, `, "h%d"`, i)
		}
		b.WriteString("]}]\n")
	} else {
		b.WriteString("- targets:\n")
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "  - h%d\n", i)
		}
	}
	return b.String()
}

// TestHugeHostFileWhileServing: the 16 MiB host files, YAML then JSON, written while
// the exporter runs (the YAML one read at a SIGHUP, the JSON one before the next round) are
// refused, naming --config.max-targets, and the provider keeps the host of its good file; all
// along /metrics answers 200 within 5 s, and the process's peak resident memory (VmHWM) stays
// under the chart's limit, 384 MiB. The exporter built with the race detector, whose shadow
// memory multiplies the heap, is held to twice that.
func TestHugeHostFileWhileServing(t *testing.T) {
	providers := specialHostFiles(t)
	dir := filepath.Dir(providers)
	inv := filepath.Join(dir, "inventory")
	for _, special := range []string{"fifo.yml", "sock.yml", "zero.yml"} {
		if err := os.Remove(filepath.Join(inv, special)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(providers)
	if err != nil {
		t.Fatal(err)
	}
	testutil.ReplaceFile(t, providers, strings.Replace(string(data), "hostFiles: [inventory/*.yml]", "hostFiles: [inventory/*.yml, inventory/*.json]", 1))
	x := startExporter(t, "--config.file="+providers, "--provider-check-interval=10s")
	good := `proxy_operator_host_file_targets{file="` + filepath.Join(inv, "good.yml") + `",provider="lab"} 1`
	if _, metrics := x.get("/metrics"); !strings.Contains(metrics, good) {
		t.Fatalf("the good file's host is not counted; /metrics:\n%.3000s", metrics)
	}

	// /metrics, polled all along by a client of its own.
	var (
		mu      sync.Mutex
		worst   time.Duration
		answers int
		last    string
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		client := &http.Client{Timeout: 60 * time.Second}
		for {
			start := time.Now()
			resp, err := client.Get(x.base + "/metrics")
			var body strings.Builder
			code := 0
			if err == nil {
				code = resp.StatusCode
				_, err = io.Copy(&body, resp.Body)
				resp.Body.Close()
			}
			took := time.Since(start)
			mu.Lock()
			answers++
			worst = max(worst, took)
			last = body.String()
			mu.Unlock()
			if err != nil || code != http.StatusOK {
				t.Errorf("/metrics: %d %v after %v", code, err, took)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	refused := func(file string) func() bool {
		want := `proxy_operator_host_file_last_read_successful{file="` + filepath.Join(inv, file) + `",provider="lab"} 0`
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(last, want)
		}
	}

	testutil.ReplaceFile(t, filepath.Join(inv, "huge.yml"), hugeHostFile(false))
	x.signal(syscall.SIGHUP)
	testutil.Eventually(t, 60*time.Second, "the YAML file refused", refused("huge.yml"))
	testutil.ReplaceFile(t, filepath.Join(inv, "huge.json"), hugeHostFile(true))
	testutil.Eventually(t, 60*time.Second, "the JSON file refused at the next round", refused("huge.json"))
	// One more round: the refused files are not parsed again, and nothing grows.
	time.Sleep(12 * time.Second)
	close(stop)
	<-stopped

	peak := procStatusKiB(t, x.proc.Cmd.Process.Pid, "VmHWM") / 1024
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d answers of /metrics, the slowest in %v; peak RSS %.0f MiB", answers, worst, peak)
	if worst > 5*time.Second {
		t.Errorf("the slowest /metrics answer took %v, want within 5s", worst)
	}
	limit := 384.0
	if raceEnabled {
		limit *= 2
	}
	if peak > limit {
		t.Errorf("peak RSS %.0f MiB, want under %.0f MiB", peak, limit)
	}
	if !strings.Contains(last, good) {
		t.Errorf("the good file's host is no longer counted; /metrics:\n%.3000s", last)
	}
	for _, file := range []string{"huge.yml", "huge.json"} {
		logged := false
		for _, r := range x.logs.Records() {
			logged = logged || r["msg"] == "host file does not read well, keeping its last good targets" &&
				r["file"] == filepath.Join(inv, file) && strings.Contains(fmt.Sprint(r["err"]), "--config.max-targets=100000")
		}
		if !logged {
			t.Errorf("%s: no log of its refusal naming --config.max-targets=100000", file)
		}
	}
}
