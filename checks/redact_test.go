package checks

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// testKeyPEM is a private key block as ssh-keygen and a service-account key hold one.
const testKeyPEM = `-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj
MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu
NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ
-----END PRIVATE KEY-----
`

func TestSanitizeStripsControlCharactersAndCuts(t *testing.T) {
	msg := "libvirt: \x1b[31mpool\x1b[0m broken\r\n\tline two\x00\x07 \u202eevil\u202c " + strings.Repeat("é", 2000) + "\xff"
	got := Sanitize(msg)
	if len(got) > MaxMessageLen {
		t.Errorf("sanitized message is %d bytes, want at most %d", len(got), MaxMessageLen)
	}
	if !utf8.ValidString(got) {
		t.Errorf("sanitized message is not valid UTF-8: %q", got)
	}
	for _, r := range got {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			t.Fatalf("sanitized message keeps control character %U: %q", r, got)
		}
	}
	if !strings.HasPrefix(got, "libvirt: [31mpool [0m broken line two evil éé") || !strings.HasSuffix(got, "...") {
		t.Errorf("sanitized message = %q; want the text with control characters as single spaces, cut with ...", got)
	}
	if s := "a short message"; Sanitize(s) != s {
		t.Errorf("Sanitize(%q) = %q, want it unchanged", s, Sanitize(s))
	}
}

func TestRedactTokenShapes(t *testing.T) {
	for _, c := range []struct{ in, secret, keep string }{
		{"request failed: Authorization: Bearer ya29.a0AfH6SMBx-token_value", "ya29.a0AfH6SMBx", "Authorization: Bearer [redacted]"},
		{"header Basic dXNlcjpodW50ZXIy", "dXNlcjpodW50ZXIy", "Basic [redacted]"},
		{`token endpoint said {"access_token": "ya29.c.secretvalue", "expires_in": 3599}`, "ya29.c.secretvalue", `"access_token": "[redacted]"`},
		{"POST /token?client_secret=s3cr3t&grant_type=x", "s3cr3t", "client_secret=[redacted]&grant_type=x"},
		{"login with password=hunter22 refused", "hunter22", "password=[redacted] refused"},
		{"dial https://admin:Pa55word@vc.example.com/sdk failed", "Pa55word", "https://admin:[redacted]@vc.example.com/sdk"},
		{"key " + testKeyPEM + " rejected", "MIIEvQIBADANBgkq", "key [redacted private key]"},
		{"cut short: -----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0", "MIIEvQIBADANBgkq", "cut short: [redacted private key]"},
	} {
		got := Redact(c.in)
		if strings.Contains(got, c.secret) || !strings.Contains(got, c.keep) {
			t.Errorf("Redact(%q) = %q; want %q without %q", c.in, got, c.keep, c.secret)
		}
	}
	for _, s := range []string{
		"the API rejected the Bearer token (HTTP 401)",
		"wrong password: Login failure",
		"Basic authentication is not configured",
	} {
		if got := Redact(s); got != s {
			t.Errorf("Redact(%q) = %q, want it unchanged (no credential in it)", s, got)
		}
	}
}

func TestSecretFilesAreRedactedFromEveryMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	password := write("password", "correct-horse-battery\n")
	kubeconfig := write("kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users:
- name: u
  user:
    token: kube-token-0123456789
    client-key-data: `+base64.StdEncoding.EncodeToString([]byte(testKeyPEM))+`
    tokenFile: /var/run/token
`)
	saKey := write("key.json", `{"type": "service_account", "private_key_id": "0123456789abcdef0123", "private_key": "`+
		strings.ReplaceAll(testKeyPEM, "\n", `\n`)+`", "client_email": "checker@p.iam.gserviceaccount.com", "token_uri": "http://127.0.0.1:1/token"}`)
	WatchSecretFiles(password, kubeconfig, saKey)
	RefreshSecrets()

	msg := "login as correct-horse-battery failed; token kube-token-0123456789; key id 0123456789abcdef0123; " +
		"line NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ; as JSON \"correct-horse-battery\""
	got := Sanitize(msg)
	for _, secret := range []string{"correct-horse-battery", "kube-token-0123456789", "0123456789abcdef0123", "NMoSfm76oqFvAp8Gy0iz5sx"} {
		if strings.Contains(got, secret) {
			t.Errorf("sanitized message %q still holds %q", got, secret)
		}
	}
	if !strings.HasPrefix(got, "login as [redacted] failed") {
		t.Errorf("sanitized message = %q, want the rest kept", got)
	}
	// What is not a credential stays: paths, URIs, e-mail addresses.
	for _, s := range []string{"/var/run/token", "http://127.0.0.1:1/token", "checker@p.iam.gserviceaccount.com", "service_account"} {
		if got := Sanitize("see " + s); got != "see "+s {
			t.Errorf("Sanitize(%q) = %q, want it unchanged", "see "+s, got)
		}
	}

	// A rotated password is redacted from the next refresh on, and the old one still is.
	if err := os.WriteFile(password+".new", []byte("rotated-secret-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(password+".new", password); err != nil {
		t.Fatal(err)
	}
	RefreshSecrets()
	if got := Sanitize("rotated-secret-value"); got != Redacted {
		t.Errorf("after a rotation: Sanitize(new password) = %q, want %q", got, Redacted)
	}
}

func TestRefreshSecretsSkipsWhatIsNotARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	WatchSecretFiles(fifo, "/dev/zero")
	done := make(chan struct{})
	go func() {
		RefreshSecrets()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("RefreshSecrets blocked on a FIFO")
	}
	if _, err := readSecretFile(fifo); err == nil {
		t.Error("readSecretFile read a FIFO")
	}
	if _, err := readSecretFile("/dev/zero"); err == nil {
		t.Error("readSecretFile read a device")
	}
}

// A checker's message is sanitized by the runner, whatever the checker did.
func TestRunnerSanitizesMessages(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(secret, []byte("runner-test-passphrase\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	WatchSecretFiles(secret)
	f := newFake("a", typeKVM, "h1")
	f.set("h1", reasonPoolInactive, "libvirt said \x1b[2J runner-test-passphrase\n"+strings.Repeat("x", 5000))
	r, _ := newTestRunner(t, time.Second, f)
	r.round(context.Background())
	got := mustTarget(t, r.Current(), "a", "h1").Message
	if strings.Contains(got, "runner-test-passphrase") || strings.ContainsAny(got, "\x1b\n") || len(got) > MaxMessageLen {
		t.Errorf("published message %q (%d bytes): want no secret, no control character, at most %d bytes", got, len(got), MaxMessageLen)
	}
	if !strings.HasPrefix(got, "libvirt said [2J [redacted] xxx") {
		t.Errorf("published message = %q, want the sanitized text", got)
	}
}

// BenchmarkSanitize is the cost of sanitizing one message, with the secret files of 20
// providers known (a key, a password and a kubeconfig each): a typical message, and a long one
// full of a host's control characters, as the runner pays for each verdict of a round.
func BenchmarkSanitize(b *testing.B) {
	dir := b.TempDir()
	for i := range 20 {
		for name, content := range map[string]string{
			"key":        testKeyPEM,
			"password":   fmt.Sprintf("bench-password-%02d\n", i),
			"kubeconfig": fmt.Sprintf("users:\n- name: u\n  user:\n    token: bench-token-%02d-0123456789\n", i),
		} {
			p := filepath.Join(dir, fmt.Sprintf("%s-%d", name, i))
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				b.Fatal(err)
			}
			WatchSecretFiles(p)
		}
	}
	RefreshSecrets()
	for name, msg := range map[string]string{
		"typical": "libvirt 10.0.0 on hv-042 (198.18.0.42:22); storage pool default is running: 1.2 TiB of 3.6 TiB available",
		"4KiB":    strings.Repeat("libvirt: error\x1b[31m in pool\r\n", 4096/30),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Sanitize(msg)
			}
		})
	}
}
