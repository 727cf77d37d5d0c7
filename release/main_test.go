package release

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the checks from the repository's root: they read its files (CHANGELOG.md,
// VERSION, the Makefile, the Dockerfile, docs/) and run make and go list there, by the paths a
// contributor types.
func TestMain(m *testing.M) {
	if err := os.Chdir(".."); err != nil {
		fmt.Fprintln(os.Stderr, "release: cannot change to the repository's root:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
