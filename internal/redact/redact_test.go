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

// TestShapesKeyForms: the value of a credential-named key is redacted in each form a YAML, INI
// or JSON text (or a query) writes it, quoted or not; the key, its quotes and the rest of the
// text stay.
func TestShapesKeyForms(t *testing.T) {
	for _, c := range []struct{ form, in, want string }{
		{"YAML plain", "password: hunter22", "password: " + Redacted},
		{"YAML plain, indented, several words", "auth:\n  password: correct horse battery\n  user: bob", "auth:\n  password: " + Redacted + "\n  user: bob"},
		{"YAML sequence item", "- token: abc123def", "- token: " + Redacted},
		{"YAML double-quoted", `password: "hunter22"`, `password: "` + Redacted + `"`},
		{"YAML single-quoted", "password: 'hunter22'", "password: '" + Redacted + "'"},
		{"YAML prefixed key", "  db_password: hunter22", "  db_password: " + Redacted},
		{"YAML flow mapping", "{user: bob, password: hunter22}", "{user: bob, password: " + Redacted + "}"},
		{"INI spaced", "[db]\npassword = hunter22\nhost = h", "[db]\npassword = " + Redacted + "\nhost = h"},
		{"INI spaced, several words", "passphrase = correct horse battery", "passphrase = " + Redacted},
		{"INI/shell single-quoted", "password='hunter22' next", "password='" + Redacted + "' next"},
		{"INI/shell double-quoted", `client_secret="s3cr3t" next`, `client_secret="` + Redacted + `" next`},
		{"query", "login with password=hunter22 refused", "login with password=" + Redacted + " refused"},
		{"query, several fields", "x?api_key=k3y&b=1", "x?api_key=" + Redacted + "&b=1"},
		{"JSON", `{"password": "hunter22", "user": "bob"}`, `{"password": "` + Redacted + `", "user": "bob"}`},
		{"JSON compact", `{"access_token":"ya29.abc","expires_in":3599}`, `{"access_token":"` + Redacted + `","expires_in":3599}`},
		{"JSON pretty", "{\n  \"password\": \"hunter22\",\n  \"user\": \"bob\"\n}", "{\n  \"password\": \"" + Redacted + "\",\n  \"user\": \"bob\"\n}"},
	} {
		if got := Shapes(c.in); got != c.want {
			t.Errorf("%s: Shapes(%q) = %q, want %q", c.form, c.in, got, c.want)
		}
	}
	// Prose with a credential word before a colon is no YAML key.
	for _, s := range []string{
		"wrong password: Login failure",
		"oauth2: cannot fetch token: 401 Unauthorized",
		"the API rejected the Bearer token (HTTP 401)",
	} {
		if got := Shapes(s); got != s {
			t.Errorf("Shapes(%q) = %q, want it unchanged", s, got)
		}
	}
}
