package testutil

import (
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot is the repository's root directory (the module's), wherever the test runs from:
// for the tests that read the repository's own files (deploy/, charts/, docs/, VERSION).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("cannot locate test/testutil's source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}
