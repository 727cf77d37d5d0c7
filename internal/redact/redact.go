// Package redact is the pure part of the exporter's one message sanitiser: it knows no secret
// file (checks.Sanitize adds those), only what any text may carry: credential shapes, control
// characters, invalid UTF-8 and unbounded length. It imports nothing of this module, so that
// every package, however low (hostpool), cleans the error text it logs the same way.
package redact

import (
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redacted replaces a secret in a text.
const Redacted = "[redacted]"

// MaxLen is the length at which Text cuts by default (checks.MaxMessageLen).
const MaxLen = 512

// Text makes s fit to show anywhere: credential shapes redacted (Shapes), control characters
// turned into spaces and runs of white space folded, valid UTF-8, at most n bytes (Clip).
func Text(s string, n int) string {
	s = Shapes(s)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	}), " ")
	return Clip(s, n)
}

// Err is Text of err's text at MaxLen: for an "err" attribute of a log line. nil stays "".
func Err(err error) string {
	if err == nil {
		return ""
	}
	return Text(err.Error(), MaxLen)
}

// Clip cuts s to at most n bytes at a UTF-8 boundary, marking the cut with "...".
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Shapes replaces in s anything shaped like a credential: a private key block, the token of an
// Authorization header (Bearer, Basic), the value of a token, password or secret field
// (access_token=..., "password": "..."), and the password of a URL's user part. It keeps the
// rest of s as it is (line breaks included).
func Shapes(s string) string {
	// The expressions below run only on a text that holds a word they look for: most texts
	// hold none.
	lower := strings.ToLower(s)
	if !slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(lower, w) }) {
		return s
	}
	s = PrivateKeyBlock.ReplaceAllString(s, "[redacted private key]")
	s = authHeader.ReplaceAllStringFunc(s, func(m string) string {
		scheme, token, _ := strings.Cut(m, " ")
		token = strings.TrimLeft(token, " \t")
		if strings.IndexFunc(token, func(r rune) bool { return !unicode.IsLetter(r) }) < 0 {
			// A word ("Bearer token rejected"), not a token.
			return m
		}
		return scheme + " " + Redacted
	})
	s = credentialFields(s)
	s = urlPassword.ReplaceAllString(s, "${1}"+Redacted+"@")
	return s
}

// credentialWords are the words, lower-cased, one of which a text holds when one of the
// expressions below can match it.
var credentialWords = []string{"private key", "bearer", "basic", "token", "secret", "key", "passw", "passphrase", "://"}

var (
	// PrivateKeyBlock is a PEM private key (PKCS#1, PKCS#8, EC, OpenSSH), also one cut short.
	PrivateKeyBlock = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`)
	// authHeader is an Authorization header's scheme and credentials.
	authHeader = regexp.MustCompile(`(?i)\b(?:bearer|basic)[ \t]+[A-Za-z0-9._~+/-]+=*`)
	// credentialKey is a credential-named key and what separates it from its value: key=value
	// as in a query, a form or an INI file, "key": "value" as in JSON, key: value as in YAML;
	// the key may carry a prefix (db_password) and be quoted. credentialFields reads the value.
	credentialKey = regexp.MustCompile(`(?i)(?:^|[^A-Za-z0-9_])((?:[A-Za-z0-9]+[_-])*(?:(?:access|refresh|id|auth|bearer|session)[_-]?token|client[_-]?secret|private[_-]?key(?:[_-]?id)?|api[_-]?key|passw(?:or)?d|passphrase|secret|token))` +
		`(["']?[ \t]*([=:])[ \t]*)`)
	// urlPassword is the password of a URL's user part: scheme://user:password@host.
	urlPassword = regexp.MustCompile(`(://[^/\s:@]*:)[^/\s@]+@`)
)

// credentialFields redacts the value of every credential-named field in s (credentialKey):
//   - a quoted value ('x' or "x"), after = or :, anywhere: the quotes stay;
//   - an unquoted value after =: up to white space or a delimiter (&,;}), or to the end of the
//     line when the key starts its line (an INI file: password = correct horse);
//   - an unquoted value after :, only where a YAML key stands: at the start of a line (after
//     indentation or "- ") to the end of the line, or in a flow mapping ({password: x, ...})
//     up to the next , or }. Elsewhere a colon is prose ("wrong password: Login failure").
func credentialFields(s string) string {
	var b strings.Builder
	done := 0
	for _, m := range credentialKey.FindAllStringSubmatchIndex(s, -1) {
		keyStart, valStart := m[2], m[5]
		if keyStart < done {
			continue
		}
		assign := s[m[6]] == '='
		end := valueEnd(s, keyStart, valStart, assign)
		if end <= valStart {
			continue
		}
		if q := s[valStart]; q == '"' || q == '\'' {
			b.WriteString(s[done:valStart+1] + Redacted + string(q))
		} else {
			b.WriteString(s[done:valStart] + Redacted)
		}
		done = end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// valueEnd is where the value starting at s[start:] ends (start when there is none to redact),
// for the key at s[key:] (credentialFields).
func valueEnd(s string, key, start int, assign bool) int {
	if start >= len(s) {
		return start
	}
	lineEnd := strings.IndexByte(s[start:], '\n')
	if lineEnd < 0 {
		lineEnd = len(s)
	} else {
		lineEnd += start
	}
	if q := s[start]; q == '"' || q == '\'' {
		if i := strings.IndexByte(s[start+1:lineEnd], q); i >= 0 {
			return start + 1 + i + 1
		}
		return lineEnd
	}
	lineStart := strings.LastIndexByte(s[:key], '\n') + 1
	atLineStart := strings.Trim(s[lineStart:key], " \t-\"'") == ""
	if atLineStart {
		return start + len(strings.TrimRight(s[start:lineEnd], " \t\r"))
	}
	before := strings.TrimRight(s[:key], " \t\"'")
	inFlow := strings.HasSuffix(before, "{") || strings.HasSuffix(before, ",")
	if !assign && !inFlow {
		return start
	}
	stop := "\t\n\r \"'&,;}"
	if inFlow && !assign {
		stop = "\n\r,}"
	}
	if i := strings.IndexAny(s[start:lineEnd], stop); i >= 0 {
		return start + i
	}
	return lineEnd
}
