package kube

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fakeRepo(t *testing.T, gomod string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, toolsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, toolsDir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const fakeGoMod = "module example.com/tools\n\ngo 1.26\n\nrequire (\n\tk8s.io/kubernetes v1.99.0\n)\n"

// A cache whose stamp matches the tools module is used as is: no build, no lock wait.
func TestEnsureBinariesUsesCache(t *testing.T) {
	root := fakeRepo(t, fakeGoMod)
	version, stamp, err := toolsIdentity(filepath.Join(root, toolsDir))
	if err != nil {
		t.Fatal(err)
	}
	if version != "v1.99.0" {
		t.Fatalf("version = %q, want v1.99.0", version)
	}
	dir := filepath.Join(root, "bin", "kube-v1.99.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte(stamp+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged []string
	logf := func(format string, args ...any) { logged = append(logged, format) }
	apiserver, etcd, err := ensureBinaries(context.Background(), root, logf)
	if err != nil {
		t.Fatal(err)
	}
	if apiserver != filepath.Join(dir, "kube-apiserver") || etcd != filepath.Join(dir, "etcd") {
		t.Errorf("paths = %s, %s; want them in %s", apiserver, etcd, dir)
	}
	if len(logged) != 0 {
		t.Errorf("a cached build logged %q", logged)
	}

	// Another go.mod means another stamp: the cache is stale.
	if err := os.WriteFile(filepath.Join(root, toolsDir, "go.mod"), []byte(fakeGoMod+"\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stamp2, err := toolsIdentity(filepath.Join(root, toolsDir))
	if err != nil {
		t.Fatal(err)
	}
	if stamp2 == stamp || upToDate(dir, stamp2) {
		t.Errorf("a changed go.mod still matches the cache")
	}
}

func TestToolsIdentityNeedsKubernetes(t *testing.T) {
	root := fakeRepo(t, "module example.com/tools\n")
	if _, _, err := toolsIdentity(filepath.Join(root, toolsDir)); err == nil || !strings.Contains(err.Error(), "k8s.io/kubernetes") {
		t.Errorf("err = %v, want one naming k8s.io/kubernetes", err)
	}
}

// Two builders never run at once: the second waits on the lock and gives up with its context.
func TestBuildLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockFile(context.Background(), path, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var waited []string
	_, err = lockFile(ctx, path, func(format string, args ...any) { waited = append(waited, format) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: err = %v, want deadline exceeded", err)
	}
	if len(waited) != 1 {
		t.Errorf("the waiting builder logged %d lines, want 1 saying it waits", len(waited))
	}
	unlock()
	unlock2, err := lockFile(context.Background(), path, t.Logf)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}
