package kvmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The kernel sends a child its parent-death signal when the THREAD that forked it exits, not the
// process. Go may fork from any thread, and a thread can end while the process lives on (a goroutine
// that exits while locked to its thread takes the thread with it). Every process of this package is
// therefore forked from one goroutine locked to its thread for the life of the test process, so
// SIGKILL reaches the children exactly when the test process dies.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func spawnLoop() {
	runtime.LockOSThread()
	// Never unlocked: the thread must outlive every child it forks.
	for req := range spawnReqs {
		req.done <- req.cmd.Start()
	}
}

// startCmd starts cmd from the spawning thread with SIGKILL as its parent-death signal.
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnRequest)
		go spawnLoop()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	spawnReqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// run runs a short command to completion and returns its combined output.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.WaitDelay = time.Second
	if err := startCmd(cmd); err != nil {
		return "", fmt.Errorf("start %s: %w", name, err)
	}
	if err := cmd.Wait(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// daemon is a long-running process started by this package.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string // file the daemon writes its output to
	done chan struct{}
	err  error // set before done closes
}

// startDaemon starts cmd with its output appended to logPath and reaps it in the background.
func startDaemon(name string, cmd *exec.Cmd, logPath string) (*daemon, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer logf.Close() // the child holds its own copy
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	if cmd.Stderr == nil {
		cmd.Stderr = logf
	}
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *daemon) signal(sig syscall.Signal) error {
	if d.exited() {
		return fmt.Errorf("%s has exited: %v", d.name, d.err)
	}
	if err := d.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", d.name, err)
	}
	return nil
}

// stop sends sig, waits up to grace for the exit, then kills. It returns once the process is reaped.
func (d *daemon) stop(sig syscall.Signal, grace time.Duration) {
	if d.exited() {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		// A stopped process keeps a termination signal pending until it runs again.
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-d.done:
		return
	case <-time.After(grace):
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}

// errorWithLog adds the end of the daemon's log to err, which is usually where the reason is.
func (d *daemon) errorWithLog(err error) error {
	return fmt.Errorf("%w; end of %s: %s", err, d.log, logTail(d.log, 15))
}

func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, " | ")
}

// waitFor polls cond until it reports true, fails, the daemon exits, or the timeout passes.
func waitFor(d *daemon, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		ok, err := cond()
		if err != nil {
			return d.errorWithLog(fmt.Errorf("wait for %s: %w", what, err))
		}
		if ok {
			return nil
		}
		if d.exited() {
			return d.errorWithLog(fmt.Errorf("%s exited before %s: %v", d.name, what, d.err))
		}
		if time.Now().After(deadline) {
			return d.errorWithLog(fmt.Errorf("%s: %w after %s", what, errTimeout, timeout))
		}
		time.Sleep(delay)
	}
}

var errTimeout = errors.New("timed out")
