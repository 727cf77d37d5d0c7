// Package filestate identifies one version of a file, so that a file read once is read again
// exactly when it changed. It is a leaf: the checks, the KVM connection pool and the exporter
// share it without importing each other.
package filestate

import (
	"os"
	"syscall"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// State identifies one version of a file: a Kubernetes Secret rotated in place swaps a symlink
// (a new inode), an editor rewrites the file (a new modification time or size). Every provider
// type that reads a file (a key, a kubeconfig, a CA bundle, a password) notices a change with
// it, at its next check. The zero value is "never read" (or no file). States compare with ==.
type State struct {
	dev, ino uint64
	size     int64
	mod      time.Time
}

// Stat returns the state of the file at path, following symlinks (as a Secret mount needs). An
// empty path has the zero state. A stat that has not returned within fileread.DefaultTimeout (a
// stalled network mount) is abandoned: a *fileread.TimeoutError, as is every stat or read of the
// file until it returns, so that no caller (a round's check, the inventory) waits on a mount.
func Stat(path string) (State, error) {
	if path == "" {
		return State{}, nil
	}
	return fileread.Bounded("stat", path, fileread.DefaultTimeout, func() (State, error) { return stat(path) })
}

// stat is Stat without its deadline; a test blocks it to see the deadline work.
var stat = statNow

func statNow(path string) (State, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return State{}, err
	}
	s := State{size: fi.Size(), mod: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s, nil
}

// Changed reports whether the file at path is no longer in state s. A file that cannot be
// stat'ed counts as changed, so that the next read reports why.
func (s State) Changed(path string) bool {
	now, err := Stat(path)
	return err != nil || now != s
}
