package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSession: the parts of testing.TB the environment's helpers use behave as in a test.
func TestSession(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var log bytes.Buffer
	s, err := NewSession(&log)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var dir string
	err = s.Run(func() {
		dir = s.TempDir()
		s.Cleanup(func() { order = append(order, "first") })
		s.Cleanup(func() { order = append(order, "second") })
		s.Cleanup(func() { s.Fatalf("a cleanup fails") })
		s.Logf("progress %d", 1)
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.HasPrefix(dir, os.Getenv("TMPDIR")) {
		t.Errorf("TempDir %s is not under TMPDIR", dir)
	}
	if err := s.Run(func() { s.Fatalf("part %s cannot start", "x"); t.Error("Fatalf returned") }); err == nil || err.Error() != "part x cannot start" {
		t.Errorf("Run after Fatalf: %v, want the message", err)
	}
	if err := s.Run(func() { s.Skipf("missing %s", "y") }); err == nil || err.Error() != "missing y" {
		t.Errorf("Run after Skipf: %v, want the message", err)
	}
	if err := s.Run(func() { s.Errorf("soft %d", 2) }); err == nil || err.Error() != "soft 2" {
		t.Errorf("Run after Errorf: %v, want the message", err)
	}
	if err := s.Run(func() { s.Setenv("A", "B") }); err == nil || !strings.Contains(err.Error(), "panic") {
		t.Errorf("Run calling a method a Session lacks: %v, want a panic reported as an error", err)
	}
	if !s.Failed() {
		t.Error("Failed() is false after Fatalf")
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "a cleanup fails") {
		t.Errorf("Close: %v, want the failing cleanup's message", err)
	}
	if strings.Join(order, " ") != "second first" {
		t.Errorf("cleanups ran in order %v, want last registered first", order)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("the session's directory is still there after Close: %v", err)
	}
	if !strings.Contains(log.String(), "progress 1") {
		t.Errorf("Logf wrote %q", log.String())
	}
}
