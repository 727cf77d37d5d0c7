package testenv

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

// Daemon is a long-running process of the test environment (etcd, kube-apiserver, prometheus,
// alertmanager, a KVM host's sshd and libvirtd), its stdout and stderr appended to a log file.
// It dies with the test process.
type Daemon struct {
	Name    string
	LogPath string
	Cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// StartDaemon starts path with args, its output appended to logPath.
func StartDaemon(name, path string, args []string, logPath string) (*Daemon, error) {
	return StartCommand(name, exec.Command(path, args...), logPath)
}

// StartDaemonTo starts path with args, its output going to out (e.g. os.Stdout, for a daemon run
// in the foreground); out is not closed, and LogTail has no log to read.
func StartDaemonTo(name, path string, args []string, out *os.File) (*Daemon, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	return StartCommand(name, cmd, "")
}

// StartCommand starts cmd, its stdout and stderr (those cmd does not set itself) appended to
// logPath; with an empty logPath, output goes where cmd says.
//
// The child is forked from a goroutine locked to its OS thread, and that goroutine stays alive
// (waiting for the child) for the child's whole life. Pdeathsig fires when the thread that forked
// the child ends, not the process; a Go thread ends only when a goroutine locked to it returns,
// so the signal comes exactly when the test process dies (even killed outright), never earlier.
func StartCommand(name string, cmd *exec.Cmd, logPath string) (*Daemon, error) {
	d := &Daemon{Name: name, LogPath: logPath, done: make(chan struct{})}
	if logPath != "" {
		logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open %s log: %w", name, err)
		}
		defer logFile.Close() // the child holds its own copy
		if cmd.Stdout == nil {
			cmd.Stdout = logFile
		}
		if cmd.Stderr == nil {
			cmd.Stderr = logFile
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	go func() {
		// Never unlocked on purpose: the thread must outlive the child, and the runtime
		// discards it when this goroutine returns after the child is gone.
		runtime.LockOSThread()
		defer close(d.done)
		if err := cmd.Start(); err != nil {
			d.waitErr = err
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		started <- nil
		d.waitErr = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	d.Cmd = cmd
	return d, nil
}

// Done is closed when the process has ended and been reaped.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Exited reports whether the process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// WaitErr is how the process ended; valid once Done is closed.
func (d *Daemon) WaitErr() error { return d.waitErr }

// PID is the process's ID.
func (d *Daemon) PID() int { return d.Cmd.Process.Pid }

// Kill ends the process with SIGKILL and waits up to timeout until it is reaped. The daemons
// keep every piece of state in the test's temporary directory, so none needs a graceful stop.
func (d *Daemon) Kill(timeout time.Duration) error {
	if d.Exited() {
		return nil
	}
	if err := d.Cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", d.Name, d.PID(), err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s (pid %d) not reaped %s after SIGKILL", d.Name, d.PID(), timeout)
	}
}

// Signal sends sig to the process, or says that it has exited.
func (d *Daemon) Signal(sig syscall.Signal) error {
	if d.Exited() {
		return fmt.Errorf("%s has exited: %v", d.Name, d.waitErr)
	}
	if err := d.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", d.Name, err)
	}
	return nil
}

// Stop sends sig, waits up to grace for the exit, then kills. It returns once the process is
// reaped.
func (d *Daemon) Stop(sig syscall.Signal, grace time.Duration) {
	if d.Exited() {
		return
	}
	_ = d.Cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		// A stopped process keeps a termination signal pending until it runs again.
		_ = d.Cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-d.done:
		return
	case <-time.After(grace):
	}
	_ = d.Cmd.Process.Kill()
	<-d.done
}

// LogTail returns the last lines of the daemon's log, for error messages.
func (d *Daemon) LogTail(lines int) string { return LogTail(d.LogPath, lines) }

// LogTail returns the last lines of the file at path, for error messages.
func LogTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log %s: %v)", path, err)
	}
	return Tail(string(b), lines)
}

// Tail returns the last lines of s (a child's output, a log), for error messages.
func Tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
