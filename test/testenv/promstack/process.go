package promstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// daemon is one long-running process of the stack (prometheus or alertmanager); it dies with
// the test process (see testenv.StartDaemon).
type daemon = testenv.Daemon

// startDaemon starts path with args, its stdout and stderr appended to logPath.
func startDaemon(name, path string, args []string, logPath string) (*daemon, error) {
	return testenv.StartDaemon(name, path, args, logPath)
}

// killTimeout bounds the wait for a killed daemon to be reaped.
const killTimeout = 10 * time.Second

func fileTail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat %s: %v)", path, err)
	}
	prefix := ""
	if st.Size() > max {
		if _, err := f.Seek(st.Size()-max, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot seek %s: %v)", path, err)
		}
		prefix = "...\n"
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return prefix + string(b)
}

// errAddrInUse marks a daemon that died because its port was taken between picking and
// binding it; the caller retries with another port.
var errAddrInUse = errors.New("listen address already in use")

// waitReady polls baseURL/-/ready until it answers 200, the daemon exits, or ctx ends.
func waitReady(ctx context.Context, d *daemon, baseURL string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/-/ready", nil)
		if err != nil {
			return fmt.Errorf("build %s ready request: %w", d.Name, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-d.Done():
			if strings.Contains(fileTail(d.LogPath, 16<<10), "address already in use") {
				return fmt.Errorf("%s exited (%v): %w", d.Name, d.WaitErr(), errAddrInUse)
			}
			return fmt.Errorf("%s exited before it was ready: %v", d.Name, d.WaitErr())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w", d.Name, baseURL, ctx.Err())
		case <-tick.C:
		}
	}
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free a moment ago, outside
// the ephemeral range. Another test may still take it before the daemon binds it; waitReady
// reports that case.
func freeLoopbackAddr() (string, error) {
	return testutil.FreeLoopbackAddr()
}
