// Package fileread reads the files an operator names (the providers file, host files, keys,
// passphrases, credentials, CA bundles) so that no such file can stall or swamp the exporter:
// only regular files are read (a named pipe, socket, device or directory is refused with an
// error naming the file and what it is, before anything that could block is opened), at most
// a size limit of them, within a deadline. It imports nothing of this module, so that every
// package, however low, can use it.
package fileread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Fixed ceilings of the small files the checks read: keys, passphrases, usernames and
// passwords, service-account keys, CA bundles, kubeconfigs (CredentialLimit); known_hosts,
// which lists every host of a fleet (KnownHostsLimit).
const (
	CredentialLimit = 1 << 20
	KnownHostsLimit = 16 << 20
)

// DefaultTimeout bounds one read: a file on a stalled network or FUSE mount is abandoned then.
const DefaultTimeout = 5 * time.Second

// NotRegularError refuses a file that is not a regular file.
type NotRegularError struct {
	Path string
	// Kind says what the file is instead, e.g. "a named pipe (FIFO)".
	Kind string
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file: only regular files are read", e.Path, e.Kind)
}

// TooLargeError refuses a file larger than the limit of the read.
type TooLargeError struct {
	Path  string
	Limit int64
	// Size is the file's size when it is known (from its metadata); 0 when the read itself
	// found more than Limit bytes.
	Size int64
}

func (e *TooLargeError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("%s is %s, larger than the limit of %s", e.Path, FormatSize(e.Size), FormatSize(e.Limit))
	}
	return fmt.Sprintf("%s is larger than the limit of %s", e.Path, FormatSize(e.Limit))
}

// TimeoutError is a read (or a stat, a glob: Bounded) abandoned at its deadline, or refused
// because an earlier one of the same file was abandoned and has not returned yet.
type TimeoutError struct {
	Path    string
	Timeout time.Duration
	// Pending: an earlier call on the file is still blocked; no new one was started.
	Pending bool
	// Op is what was abandoned: "read" when empty, else "stat" or "glob" (Bounded).
	Op string
}

func (e *TimeoutError) Error() string {
	op := e.Op
	if op == "" {
		op = "read"
	}
	if e.Pending {
		return fmt.Sprintf("%s: an earlier %s did not return (abandoned after %s); not tried again until it does", e.Path, op, e.Timeout)
	}
	return fmt.Sprintf("%s: the %s did not finish within %s and was abandoned", e.Path, op, e.Timeout)
}

// Read returns the content of the regular file at path, at most limit bytes of it, within
// DefaultTimeout. See ReadTimeout.
func Read(path string, limit int64) ([]byte, error) {
	return ReadTimeout(path, limit, DefaultTimeout)
}

// abandoned counts, per path, the reads abandoned at their deadline that have not returned
// yet: while one is blocked the file is not read again, so a stuck file costs one goroutine and
// one descriptor however often it is tried. Reads that finish in time (concurrent ones
// included) never mark the file. mu guards abandoned and is never held across I/O.
var (
	mu        sync.Mutex
	abandoned = map[string]int{}
)

// ReadTimeout returns the content of the regular file at path (symlinks followed). A file that
// is not a regular file is a *NotRegularError; one larger than limit bytes a *TooLargeError; a
// read that has not returned after timeout is abandoned (its goroutine finishes on its own) and
// returns a *TimeoutError, as does every read of the file until that one returns. Other errors
// are the *fs.PathError of stat, open or read.
func ReadTimeout(path string, limit int64, timeout time.Duration) ([]byte, error) {
	return Bounded("", path, timeout, func() ([]byte, error) { return readFile(path, limit) })
}

// Bounded runs f, a call on the file (or glob pattern) path that may block on a stalled
// network or FUSE mount (a read, a stat, a glob), within timeout: one that has not returned
// then is abandoned (its goroutine finishes on its own) and gives a *TimeoutError naming op,
// as does every call on path until that one returns, so a stuck path costs one goroutine
// however often it is tried.
func Bounded[T any](op, path string, timeout time.Duration, f func() (T, error)) (T, error) {
	var zero T
	mu.Lock()
	stuck := abandoned[path] > 0
	mu.Unlock()
	if stuck {
		return zero, &TimeoutError{Path: path, Timeout: timeout, Pending: true, Op: op}
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var finished, gaveUp bool // guarded by mu
	go func() {
		v, err := f()
		mu.Lock()
		finished = true
		if gaveUp {
			if abandoned[path]--; abandoned[path] <= 0 {
				delete(abandoned, path)
			}
		}
		mu.Unlock()
		done <- result{v, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
	}
	mu.Lock()
	if !finished {
		gaveUp = true
		abandoned[path]++
		mu.Unlock()
		return zero, &TimeoutError{Path: path, Timeout: timeout, Op: op}
	}
	mu.Unlock()
	r := <-done
	return r.v, r.err
}

// readFile is read; a test blocks it to see the deadline work.
var readFile = read

// read checks the file by its path first, so that a FIFO or a device is never opened, then
// opens it without blocking (O_NONBLOCK: a FIFO swapped in meanwhile does not wait for a
// writer) and checks the open file again, then reads at most limit+1 bytes.
func read(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Path: path, Limit: limit}
	}
	return b, nil
}

// Check reports, from its metadata only, whether the file at path would be read: it exists, is
// a regular file and holds at most limit bytes. For a file a library opens by its path itself.
func Check(path string, limit int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return check(path, fi, limit)
}

func check(path string, fi fs.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Path: path, Kind: Kind(fi.Mode())}
	}
	if fi.Size() > limit {
		return &TooLargeError{Path: path, Limit: limit, Size: fi.Size()}
	}
	return nil
}

// Kind names what a file of mode m is, for messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// IsRefused reports whether err is a refusal of this package (not a regular file, too large,
// timed out), as opposed to an error of the file system.
func IsRefused(err error) bool {
	var (
		nr *NotRegularError
		tl *TooLargeError
		to *TimeoutError
	)
	return errors.As(err, &nr) || errors.As(err, &tl) || errors.As(err, &to)
}

// FormatSize writes n bytes the way the size flags take them: "16MiB", "512KiB", "1000B".
func FormatSize(n int64) string {
	const (
		kib = 1 << 10
		mib = 1 << 20
		gib = 1 << 30
	)
	switch {
	case n >= gib && n%gib == 0:
		return strconv.FormatInt(n/gib, 10) + "GiB"
	case n >= mib && n%mib == 0:
		return strconv.FormatInt(n/mib, 10) + "MiB"
	case n >= kib && n%kib == 0:
		return strconv.FormatInt(n/kib, 10) + "KiB"
	case n >= mib:
		return strconv.FormatFloat(float64(n)/mib, 'f', 1, 64) + "MiB"
	case n >= kib:
		return strconv.FormatFloat(float64(n)/kib, 'f', 1, 64) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}
