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
// alertmanager), its stdout and stderr appended to a log file. It dies with the test process.
type Daemon struct {
	Name    string
	LogPath string
	Cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

// StartDaemon starts path with args, its output appended to logPath.
//
// The child is forked from a goroutine locked to its OS thread, and that goroutine stays alive
// (waiting for the child) for the child's whole life. Pdeathsig fires when the thread that forked
// the child ends, not the process; a Go thread ends only when a goroutine locked to it returns,
// so the signal comes exactly when the test process dies (even killed outright), never earlier.
func StartDaemon(name, path string, args []string, logPath string) (*Daemon, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	return startDaemon(name, path, args, logFile, logPath)
}

// StartDaemonTo is StartDaemon with the output going to out (e.g. os.Stdout, for a daemon run
// in the foreground); out is not closed. LogTail has no log to read.
func StartDaemonTo(name, path string, args []string, out *os.File) (*Daemon, error) {
	dup, err := dupFile(out)
	if err != nil {
		return nil, fmt.Errorf("%s output: %w", name, err)
	}
	return startDaemon(name, path, args, dup, "")
}

// dupFile returns a copy of f that can be closed without closing f.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func startDaemon(name, path string, args []string, logFile *os.File, logPath string) (*Daemon, error) {
	d := &Daemon{Name: name, LogPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked on purpose: the thread must outlive the child, and the runtime
		// discards it when this goroutine returns after the child is gone.
		runtime.LockOSThread()
		defer logFile.Close()
		defer close(d.done)
		cmd := exec.Command(path, args...)
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			d.waitErr = err
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		d.Cmd = cmd
		started <- nil
		d.waitErr = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
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

// LogTail returns the last lines of the daemon's log, for error messages.
func (d *Daemon) LogTail(lines int) string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return fmt.Sprintf("(no %s log: %v)", d.Name, err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
