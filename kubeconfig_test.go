package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

const ownKubeconfig = `apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
clusters:
- name: k
  cluster: {server: "https://198.51.100.7:6443", certificate-authority: ca.crt}
users:
- name: u
  user: {tokenFile: TOKEN}
`

// TestOwnClientConfig: the kubeconfig of --crd.kubeconfig and --shard.kubeconfig is read as
// every operator's file is (a FIFO or an oversized file refused, naming it), the files its
// context names are taken from its directory and checked before client-go opens them, and the
// token file stays a file, so that client-go picks up a rotated token.
func TestOwnClientConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca.crt", "not checked here")
	write("token", "secret-token")
	good := write("kubeconfig", strings.Replace(ownKubeconfig, "TOKEN", "token", 1))
	cfg, err := ownClientConfig(good)
	if err != nil {
		t.Fatalf("ownClientConfig: %v", err)
	}
	if want := filepath.Join(dir, "ca.crt"); cfg.TLSClientConfig.CAFile != want {
		t.Errorf("CAFile = %q; want %q, taken from the kubeconfig's directory", cfg.TLSClientConfig.CAFile, want)
	}
	if want := filepath.Join(dir, "token"); cfg.BearerTokenFile != want {
		t.Errorf("BearerTokenFile = %q; want %q, left to client-go, which re-reads it", cfg.BearerTokenFile, want)
	}
	if cfg.Host != "https://198.51.100.7:6443" {
		t.Errorf("Host = %q; want the context's server", cfg.Host)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var nr *fileread.NotRegularError
	if _, err := ownClientConfig(fifo); !errors.As(err, &nr) || !strings.Contains(err.Error(), fifo) {
		t.Errorf("a FIFO as the kubeconfig: %v; want a refusal naming it", err)
	}
	withFIFOToken := write("kubeconfig-fifo-token", strings.Replace(ownKubeconfig, "TOKEN", "fifo", 1))
	if _, err := ownClientConfig(withFIFOToken); !errors.As(err, &nr) || !strings.Contains(err.Error(), `context "c"`) {
		t.Errorf("a FIFO as the token file: %v; want a refusal naming the context and the file", err)
	}
	big := write("big", "# "+strings.Repeat("x", fileread.CredentialLimit))
	var tl *fileread.TooLargeError
	if _, err := ownClientConfig(big); !errors.As(err, &tl) {
		t.Errorf("a kubeconfig over 1 MiB: %v; want a TooLargeError", err)
	}
	if _, err := ownClientConfig(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing kubeconfig: %v; want not exist", err)
	}
}
