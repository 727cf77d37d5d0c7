package fileread

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yml")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Read(path, 10)
	if err != nil || string(b) != "0123456789" {
		t.Fatalf("Read at the limit = %q, %v; want the content", b, err)
	}
	_, err = Read(path, 9)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Size != 10 || tl.Limit != 9 {
		t.Fatalf("Read over the limit = %v; want a TooLargeError of size 10, limit 9", err)
	}
	if want := path + " is 10B, larger than the limit of 9B"; err.Error() != want {
		t.Errorf("error = %q; want %q", err, want)
	}
	link := filepath.Join(dir, "link.yml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(link, 100); err != nil || string(b) != "0123456789" {
		t.Errorf("Read through a symlink = %q, %v; want the target's content", b, err)
	}
	if _, err := Read(filepath.Join(dir, "missing.yml"), 100); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing file = %v; want fs.ErrNotExist", err)
	}
}

// TestReadRefusesSpecialFiles: a FIFO (which would block an open or a read until a writer
// comes), a socket, a device (/dev/zero, read until memory runs out) and a directory are each
// refused at once, by name and kind, also behind a symlink.
func TestReadRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.yml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	zero := filepath.Join(dir, "zero.yml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifo-link.yml")
	if err := os.Symlink(fifo, fifoLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{
		{fifo, "a named pipe (FIFO)"},
		{fifoLink, "a named pipe (FIFO)"},
		{sock, "a socket"},
		{zero, "a character device"},
		{dir, "a directory"},
	} {
		_, err := ReadTimeout(tc.path, 1<<20, time.Minute)
		var nr *NotRegularError
		if !errors.As(err, &nr) || nr.Kind != tc.kind {
			t.Errorf("Read(%s) = %v; want a NotRegularError of kind %q", tc.path, err, tc.kind)
			continue
		}
		if want := tc.path + " is " + tc.kind + ", not a regular file: only regular files are read"; err.Error() != want {
			t.Errorf("error = %q; want %q", err, want)
		}
		if err := Check(tc.path, 1<<20); !errors.As(err, &nr) {
			t.Errorf("Check(%s) = %v; want a NotRegularError", tc.path, err)
		}
	}
}

// TestReadDeadline: a read that does not return is abandoned at its deadline, and the file is
// not read again (no second goroutine) until the blocked read returns.
func TestReadDeadline(t *testing.T) {
	release := make(chan struct{})
	calls := 0
	readFile = func(path string, limit int64) ([]byte, error) {
		calls++
		<-release
		return []byte("late"), nil
	}
	defer func() { readFile = read }()
	_, err := ReadTimeout("/slow/file.yml", 10, time.Millisecond)
	var to *TimeoutError
	if !errors.As(err, &to) || to.Pending {
		t.Fatalf("blocked read = %v; want a TimeoutError", err)
	}
	if !strings.Contains(err.Error(), "did not finish within 1ms") {
		t.Errorf("error = %q; want it to name the deadline", err)
	}
	_, err = ReadTimeout("/slow/file.yml", 10, time.Millisecond)
	if !errors.As(err, &to) || !to.Pending {
		t.Fatalf("read while the first is blocked = %v; want a pending TimeoutError", err)
	}
	close(release)
	for {
		mu.Lock()
		n := abandoned["/slow/file.yml"]
		mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if calls != 1 {
		t.Errorf("the file was read %d times while blocked; want 1", calls)
	}
	if b, err := ReadTimeout("/slow/file.yml", 10, time.Minute); err != nil || string(b) != "late" {
		t.Errorf("read after the blocked one returned = %q, %v; want it read again", b, err)
	}
}

// TestReadsInTimeNeverRefused: reads of one file that finish in time, back to back or at the
// same moment (two providers naming one known_hosts file), are never refused as pending: only
// an abandoned read marks a file.
func TestReadsInTimeNeverRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if b, err := Read(path, 100); err != nil || string(b) != "content" {
			t.Fatalf("read %d back to back = %q, %v; want the content", i, b, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for range 50 {
				if _, err := Read(path, 100); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent read: %v; want the content", err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		1 << 20: "1MiB", 16 << 20: "16MiB", 512 << 10: "512KiB", 1000: "1000B", 7 << 30: "7GiB",
		7_000_000: "6.7MiB", 1500: "1.5KiB",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q; want %q", n, got, want)
		}
	}
}
