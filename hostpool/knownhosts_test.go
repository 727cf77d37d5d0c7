package hostpool

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// TestKnownHostsIndexAgreesWithWholeFile checks that the callback a dial gets (the lines that can
// name its address) judges every key as knownhosts' callback over the whole file does: plain
// hosts with and without ports, several names on a line, wildcards, negations, hashed names, a
// revoked key, a line knownhosts skips, comments and blank lines.
func TestKnownHostsIndexAgreesWithWholeFile(t *testing.T) {
	keys := make([]ssh.PublicKey, 8)
	for i := range keys {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if keys[i], err = ssh.NewPublicKey(pub); err != nil {
			t.Fatal(err)
		}
	}
	line := func(patterns string, k ssh.PublicKey) string {
		return patterns + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
	}
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%s\n", line(fmt.Sprintf("hv-%d.example.net,198.18.0.%d", i, i), keys[i%3]))
	}
	fmt.Fprintf(&b, "# a comment\n\n")
	fmt.Fprintf(&b, "%s\n", line("[hv-7.example.net]:2222", keys[3]))
	fmt.Fprintf(&b, "\t%s\r\n", line("hv-8.example.net:2200", keys[4]))
	fmt.Fprintf(&b, "%s\n", line("*.wild.example.net,!bad.wild.example.net", keys[5]))
	fmt.Fprintf(&b, "%s\n", line(knownhosts.HashHostname("hashed.example.net"), keys[6]))
	fmt.Fprintf(&b, "%s\n", line(knownhosts.HashHostname("[hashed.example.net]:2222"), keys[7]))
	fmt.Fprintf(&b, "%s\n", line("hv-9.example.net", keys[6]))
	fmt.Fprintf(&b, "@revoked * %s\n", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(keys[2]))))
	fmt.Fprintf(&b, "skipped.example.net ssh-ed25519 not-base64\n")
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	whole, err := knownhosts.New(path)
	if err != nil {
		t.Fatal(err)
	}
	kh, err := loadKnownHosts(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(kh.byAddr) < 400 || len(kh.hashed) != 2 {
		t.Fatalf("indexed %d addresses and %d hashed lines, want at least 400 and 2", len(kh.byAddr), len(kh.hashed))
	}
	verdict := func(err error) string {
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &re):
			return "revoked"
		case errors.As(err, &ke):
			var want []string
			for _, w := range ke.Want {
				want = append(want, ssh.FingerprintSHA256(w.Key))
			}
			return fmt.Sprintf("key error, want %v", want)
		}
		return "error: " + err.Error()
	}
	remote := &net.TCPAddr{IP: net.IPv4(198, 18, 255, 1), Port: 22}
	addrs := []string{"hv-0.example.net:22", "hv-1.example.net:22", "198.18.0.4:22", "hv-7.example.net:22",
		"hv-7.example.net:2222", "hv-8.example.net:2200", "hv-8.example.net:22", "a.wild.example.net:22",
		"bad.wild.example.net:22", "hashed.example.net:22", "hashed.example.net:2222", "hv-9.example.net:22",
		"skipped.example.net:22", "nowhere.example.net:22", "[::1]:22"}
	for _, addr := range addrs {
		cb, err := kh.callback(addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		for i, k := range keys {
			want, got := verdict(whole(addr, remote, k)), verdict(cb(addr, remote, k))
			if got != want {
				t.Errorf("%s, key %d: the address's lines say %s, the whole file %s", addr, i, got, want)
			}
		}
	}
}

// TestKnownHostsWholeFileErrors checks that a file knownhosts rejects is rejected at load, its
// error naming the file.
func TestKnownHostsWholeFileErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte("host.example.net ssh-ed25519 not-base64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadKnownHosts(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("loadKnownHosts: %v, want an error naming %s", err, path)
	}
}
