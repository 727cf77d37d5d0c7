package filestate

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// TestStatStalled: a stat that does not return (a stalled network mount) is abandoned at
// fileread.DefaultTimeout with a *fileread.TimeoutError, the file counts as changed, a stat
// while it is blocked does not start another, and once it returns the file is stat'ed again.
func TestStatStalled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	good, err := Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	release, returned := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	stat = func(p string) (State, error) {
		calls.Add(1)
		<-release
		defer close(returned)
		return State{}, errors.New("late")
	}
	var te *fileread.TimeoutError
	start := time.Now()
	if _, err := Stat(path); !errors.As(err, &te) || te.Pending || te.Op != "stat" {
		t.Fatalf("stalled stat: %v, want a *fileread.TimeoutError", err)
	}
	if took := time.Since(start); took < fileread.DefaultTimeout {
		t.Errorf("the stat returned after %s, before its deadline %s", took, fileread.DefaultTimeout)
	}
	start = time.Now()
	if !good.Changed(path) || time.Since(start) >= fileread.DefaultTimeout {
		t.Errorf("while the stat is blocked, Changed waited %s or said unchanged", time.Since(start))
	}
	if _, err := Stat(path); !errors.As(err, &te) || !te.Pending || calls.Load() != 1 {
		t.Errorf("while the stat is blocked: %v after %d stats, want a pending TimeoutError and one stat", err, calls.Load())
	}
	close(release)
	<-returned
	stat = statNow
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := Stat(path); err == nil && st == good {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the stat returned: %v, want the file's state", err)
		}
	}
}
