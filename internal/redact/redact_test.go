package redact

import (
	"errors"
	"strings"
	"testing"
)

// TestText: control characters become spaces, white space folds, invalid UTF-8 is replaced,
// credential shapes are redacted and the text is cut at n bytes on a rune boundary.
func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ssh: handshake failed:\x1b[31m red\r\n\x00next\ttab", "ssh: handshake failed: [31m red next tab"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"dial: Authorization: Bearer abc.def-123 refused", "dial: Authorization: Bearer " + Redacted + " refused"},
		{"https://user:hunter22@host/x", "https://user:" + Redacted + "@host/x"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n", "[redacted private key]"},
	} {
		if got := Text(c.in, MaxLen); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("é", 1000)
	if got := Text(long, MaxLen); len(got) > MaxLen || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "éé") {
		t.Errorf("a 2000-byte text: %d bytes %q..., want at most %d ending with ...", len(got), got[:10], MaxLen)
	}
	if got := Err(errors.New("libvirt:\x07 no\nsocket")); got != "libvirt: no socket" {
		t.Errorf("Err = %q", got)
	}
	if Err(nil) != "" {
		t.Error("Err(nil) is not empty")
	}
}
