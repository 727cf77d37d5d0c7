package promstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// daemon is one long-running process of the stack (prometheus or alertmanager).
type daemon struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been waited for
	waitErr error         // valid after done is closed
}

// startDaemon starts path with args, its stdout and stderr appended to logPath.
//
// The process is started from a goroutine locked to its OS thread, and that goroutine stays
// alive (waiting for the process) for the process's whole life. Pdeathsig is tied to the thread
// that forked the child, not to the process: a Go thread only ever exits when a goroutine locked
// to it returns, so this makes the signal fire exactly when the test process dies, never earlier.
func startDaemon(name, path string, args []string, logPath string) (*daemon, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	d := &daemon{name: name, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked on purpose: the thread must outlive the child, and it is discarded
		// when this goroutine returns after the child is gone.
		runtime.LockOSThread()
		defer logFile.Close()
		cmd := exec.Command(path, args...)
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		d.cmd = cmd
		started <- nil
		d.waitErr = cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return d, nil
}

// exited reports whether the process has ended.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop kills the process and waits for it to be reaped.
func (d *daemon) stop() error {
	if d.exited() {
		return nil
	}
	// Killing is enough: all state lives in a temporary directory that is thrown away.
	if err := d.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", d.name, d.cmd.Process.Pid, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) not reaped 10s after SIGKILL", d.name, d.cmd.Process.Pid)
	}
}

// logTail returns at most the last max bytes of the daemon's log.
func (d *daemon) logTail(max int64) string { return fileTail(d.logPath, max) }

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
			return fmt.Errorf("build %s ready request: %w", d.name, err)
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
		case <-d.done:
			if strings.Contains(d.logTail(16<<10), "address already in use") {
				return fmt.Errorf("%s exited (%v): %w", d.name, d.waitErr, errAddrInUse)
			}
			return fmt.Errorf("%s exited before it was ready: %v", d.name, d.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w", d.name, baseURL, ctx.Err())
		case <-tick.C:
		}
	}
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free a moment ago.
// Another process may take it before the daemon binds it; waitReady reports that case.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free loopback port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("release picked port %s: %w", addr, err)
	}
	return addr, nil
}
