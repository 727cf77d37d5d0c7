package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// LockImage takes the lock of the image build (make image writes .build/ under root), held by
// one test at a time across processes (go test runs packages at once: TestImage and the chart's
// test on a node both build and read .build/image), and returns its release.
func LockImage(tb testing.TB, root string) (unlock func()) {
	tb.Helper()
	dir := filepath.Join(root, ".build")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".image.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		tb.Fatalf("lock %s: %v", f.Name(), err)
	}
	return func() { f.Close() }
}
