package checks

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
	"github.com/provider-health-exporter/provider-health-exporter/internal/redact"
)

// MaxMessageLen bounds the message a check reports for a target, in bytes: Sanitize cuts a
// longer one, marking the cut with "...". The runner's own notes around a message (a pending
// threshold, maintenance, the last contact) keep the published message under the
// ProviderHealth object's 1 KiB.
const MaxMessageLen = 512

// Redacted replaces a secret in a message.
const Redacted = redact.Redacted

// Limits of the secret set: what a secret file may hold to be read, and how short a value may
// be and still be redacted (a shorter one is no real credential, and replacing it would garble
// every message).
const (
	maxSecretFileSize = 4 << 20
	minSecretLen      = 4
	maxSecretValues   = 10000
)

// Sanitize makes a check's message fit to show anywhere (logs, metrics' debug output, the
// status page, the ProviderHealth object, Events, /probe): it replaces the contents of every
// secret file a provider of the process names (SecretFile) and anything shaped like a token
// (Redact), turns control characters into spaces and folds runs of white space, makes the text
// valid UTF-8, and cuts it at MaxMessageLen bytes. The runner sanitizes every verdict's message,
// and every provider type sanitizes its messages before it logs them or answers a probe.
func Sanitize(s string) string {
	if r := secrets.replacer.Load(); r != nil {
		s = r.Replace(s)
	}
	return redact.Text(s, MaxMessageLen)
}

// sanitized returns a copy of a checker's results with every message sanitized (a copy: the
// checker may keep the slice it returned).
func sanitized(rs []TargetResult) []TargetResult {
	out := make([]TargetResult, len(rs))
	for i, r := range rs {
		r.Message = Sanitize(r.Message)
		out[i] = r
	}
	return out
}

// Redact replaces in s the contents of every secret file a provider of the process names and
// anything shaped like a credential: a private key block, the token of an Authorization header
// (Bearer, Basic), the value of a token, password or secret field (access_token=..., "password":
// "..."), and the password of a URL's user part. It keeps the rest of s as it is (line breaks
// included): for multi-line texts such as a probe's trace.
func Redact(s string) string {
	if r := secrets.replacer.Load(); r != nil {
		s = r.Replace(s)
	}
	return redact.Shapes(s)
}

// Secret files: the files the providers name whose content is a credential (a password, a key,
// a kubeconfig), read when they change, so that no message shows what they hold, whichever
// provider's message it is.

// secrets is the process's one set of secret files: every provider type's messages are checked
// against every provider's secret files.
var secrets = &secretSet{files: map[string]*secretFile{}}

type secretSet struct {
	// mu guards files; never held across a read.
	mu    sync.Mutex
	files map[string]*secretFile
	// replacer replaces every value of every file; nil while none is known.
	replacer atomic.Pointer[strings.Replacer]
}

type secretFile struct {
	state  FileState
	values []string
}

// WatchSecretFiles adds files whose content is a credential to the set every message is
// redacted of (it is never shrunk: a file a reload dropped may still be what a message quotes).
// It reads nothing: RefreshSecrets does. Registered constructors call it with the secret files
// of their provider's block (config.File.Secret).
func WatchSecretFiles(paths ...string) {
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	for _, p := range paths {
		if p != "" && secrets.files[p] == nil {
			secrets.files[p] = &secretFile{}
		}
	}
}

// RefreshSecrets reads again every secret file whose state changed since it was last read, so
// that a rotated credential is redacted from the next message on. The runner calls it before
// each round. It reads regular files only, at most a few MiB of each, and never blocks on one
// (a FIFO or a device is skipped); a file that cannot be read keeps the values last read from
// it. No lock is held while reading.
func RefreshSecrets() {
	secrets.mu.Lock()
	known := make(map[string]FileState, len(secrets.files))
	for p, f := range secrets.files {
		known[p] = f.state
	}
	secrets.mu.Unlock()
	read := make(map[string]*secretFile)
	for p, was := range known {
		st, err := StatFile(p)
		if err != nil || st == was {
			continue
		}
		if b, err := readSecretFile(p); err == nil {
			read[p] = &secretFile{state: st, values: secretValues(b)}
		}
	}
	if len(read) == 0 {
		return
	}
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	for p, f := range read {
		secrets.files[p] = f
	}
	var values []string
	for _, f := range secrets.files {
		values = append(values, f.values...)
	}
	secrets.replacer.Store(newSecretReplacer(values))
}

// readSecretFile reads a regular file of at most maxSecretFileSize bytes, within fileread's
// deadline: a FIFO, a device or a file on a stalled mount is refused rather than waited on.
func readSecretFile(path string) ([]byte, error) {
	return fileread.Read(path, maxSecretFileSize)
}

// newSecretReplacer replaces every value, the longest first (so a value that holds another is
// replaced whole); nil when there is none.
func newSecretReplacer(values []string) *strings.Replacer {
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
	values = slices.Compact(values)
	if len(values) > maxSecretValues {
		values = values[:maxSecretValues]
	}
	if len(values) == 0 {
		return nil
	}
	pairs := make([]string, 0, 2*len(values))
	for _, v := range values {
		pairs = append(pairs, v, Redacted)
	}
	return strings.NewReplacer(pairs...)
}

// secretValues are the strings of a secret file's content that must never be shown: the whole
// content when it is one line (a password, a passphrase, a token), each line of a private key
// block, and the values of the credential fields of a YAML or JSON file (a kubeconfig's token,
// password and client-key-data, a service-account key's private_key and private_key_id), each
// also as it reads quoted in Go or JSON.
func secretValues(b []byte) []string {
	var out []string
	add := func(v string) {
		v = strings.TrimSpace(v)
		if len(v) < minSecretLen {
			return
		}
		out = append(out, v)
		if q := strconv.Quote(v); q[1:len(q)-1] != v {
			out = append(out, q[1:len(q)-1])
		}
	}
	text := string(b)
	if t := strings.TrimSpace(text); !strings.ContainsAny(t, "\r\n") {
		add(t)
	}
	keyLines(text, add)
	var doc any
	if yaml.Unmarshal(b, &doc) == nil {
		credentialValues(doc, "", add)
	}
	return out
}

// keyLines adds each line of the private key blocks of text.
func keyLines(text string, add func(string)) {
	for _, block := range redact.PrivateKeyBlock.FindAllString(text, -1) {
		for line := range strings.Lines(block) {
			if line = strings.TrimSpace(line); !strings.HasPrefix(line, "-----") && len(line) >= 16 {
				add(line)
			}
		}
	}
}

// credentialValues walks a decoded YAML or JSON document and adds the values of its credential
// fields (and the private key lines they hold, base64-decoded for a *-data field).
func credentialValues(node any, key string, add func(string)) {
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			credentialValues(v, k, add)
		}
	case []any:
		for _, v := range n {
			credentialValues(v, key, add)
		}
	case string:
		if !credentialKey(key) {
			return
		}
		add(n)
		keyLines(n, add)
		if strings.HasSuffix(strings.ToLower(key), "data") {
			if d, err := base64.StdEncoding.DecodeString(strings.TrimSpace(n)); err == nil {
				keyLines(string(d), add)
			}
		}
	}
}

// credentialKey reports whether a field named key holds a credential: a token, a password, a
// secret, a private key or client key data, but not the path, URL or type of one.
func credentialKey(key string) bool {
	k := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(key))
	for _, not := range []string{"file", "path", "uri", "url", "type", "expiry", "command", "env"} {
		if strings.HasSuffix(k, not) {
			return false
		}
	}
	for _, is := range []string{"token", "password", "passwd", "secret", "privatekey", "keydata", "apikey"} {
		if strings.Contains(k, is) {
			return true
		}
	}
	return false
}
