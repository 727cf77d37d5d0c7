package kube

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one daemon the environment runs (etcd or kube-apiserver).
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// startProcess starts path with args, stdout and stderr appended to logPath.
//
// The child is forked from a goroutine locked to its OS thread, and that goroutine stays alive
// (waiting for the child) for the child's whole life. Pdeathsig fires when the thread that forked
// the child ends, not the process; a Go thread ends only when a goroutine locked to it returns,
// so the signal comes exactly when the test process dies, never earlier.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked on purpose: the thread must outlive the child, and the runtime
		// discards it when this goroutine returns.
		runtime.LockOSThread()
		defer logFile.Close()
		cmd := exec.Command(path, args...)
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", name, err)
			close(p.done)
			return
		}
		p.cmd = cmd
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process with SIGKILL and waits until it is reaped. Every piece of state lives
// in the test's temporary directory, so nothing needs a graceful shutdown; etcd's data stays
// consistent across a kill, which is what a restart of the API server relies on.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit 30s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// logTail returns the last lines of the process's log, for error messages.
func (p *process) logTail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no %s log: %v)", p.name, err)
	}
	return tail(strings.TrimSpace(string(b)), lines)
}
