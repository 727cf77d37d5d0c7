package config

import (
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Fields is one mapping of the providers file as a provider type's decoder sees it: a type
// block, or a mapping inside it (a list item). Its keys are already checked against the
// allowed ones (an unknown or duplicate key is reported), and merge keys are flattened. Every
// reader records what is wrong with the value at its file, line and column, names the field
// and what is allowed, and reports ok false; the decoder goes on, so that every problem of the
// file is reported at once.
type Fields struct {
	d *decoder
	m *mapping
}

// Path is the field path of the mapping, e.g. providers[2].kvm or providers[2].kvm.hosts[0].
func (f *Fields) Path() string { return f.m.path }

// Where is the node that problems about the mapping as a whole are placed at (a missing
// field): the key that holds it when there is one.
func (f *Fields) Where() *yaml.Node { return f.m.where }

// Has reports whether the key name is present.
func (f *Fields) Has(name string) bool {
	_, ok := f.m.fields[name]
	return ok
}

// Set reports whether the key name is present with a value (not null, not empty): a value a
// reader's default does not replace. A type that derives a default from other settings uses it
// to tell the values the file chose from the ones it leaves to the type.
func (f *Fields) Set(name string) bool {
	e, ok := f.m.fields[name]
	if !ok {
		return false
	}
	v := f.d.resolve(e.value)
	return v != nil && (v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!null" && v.Value != ""))
}

// Key is the node of the key name, nil when absent.
func (f *Fields) Key(name string) *yaml.Node { return f.m.fields[name].key }

// RoundTimeout is the deadline of one round of checks the file is loaded for (0: not known,
// checks off): a type whose bounds must fit a round checks them against it.
func (f *Fields) RoundTimeout() time.Duration { return f.d.roundTimeout }

// Errorf records a problem at node at (nil: the mapping); field is relative to Path ("" for
// the mapping itself).
func (f *Fields) Errorf(at *yaml.Node, field, format string, args ...any) {
	if at == nil {
		at = f.m.where
	}
	path := f.m.path
	if field != "" {
		path = join(path, field)
	}
	f.d.add(at, path, format, args...)
}

// Problems is how many problems the whole file has so far: a decoder compares it before and
// after a part to tell whether that part was valid.
func (f *Fields) Problems() int { return len(f.d.errs) }

// String reads a string field. at is nil when the key is absent; null is the empty string. A
// number is taken as written; a boolean, a list or a mapping is a problem (ok false).
func (f *Fields) String(name string) (s string, at *yaml.Node, ok bool) { return f.d.str(f.m, name) }

// Required reads a string field that must be present and not empty; hint is added to the
// problem (" (host, host:port or [v6]:port)").
func (f *Fields) Required(name, hint string) (string, *yaml.Node, bool) {
	return f.d.required(f.m, name, hint)
}

// Int reads an integer field; absent or null reports set false.
func (f *Fields) Int(name string) (i int, at *yaml.Node, set, ok bool) { return f.d.integer(f.m, name) }

// Bool reads a true/false field; absent or null is false.
func (f *Fields) Bool(name string) (b bool, ok bool) { return f.d.boolean(f.m, name) }

// File reads a local file path: relative paths are taken from the providers file's directory.
// The file is not opened: the checker that uses it reads it. "" when absent (a problem when
// required; hint is added to it).
func (f *Fields) File(name string, required bool, hint string) string {
	return f.d.filePath(f.m, name, required, hint)
}

// Duration reads a Go duration (2s, 500ms) within [lo, hi]; absent, null or empty is def.
func (f *Fields) Duration(name string, def, lo, hi time.Duration) time.Duration {
	s, v, ok := f.d.str(f.m, name)
	if !ok || s == "" {
		return def
	}
	b, err := time.ParseDuration(s)
	if err != nil {
		f.d.add(v, join(f.m.path, name), "invalid duration %s (a Go duration such as 2s or 500ms)", Quote(s))
		return def
	}
	if b < lo || b > hi {
		f.d.add(v, join(f.m.path, name), "%s is out of range (allowed: %v-%v)", s, lo, hi)
	}
	return b
}

// List reads a list field: its items (null is an empty list), the key's node, and whether the
// key is present. ok is false when the value is not a list.
func (f *Fields) List(name string) (items []*yaml.Node, key *yaml.Node, present, ok bool) {
	e, present := f.m.fields[name]
	if !present {
		return nil, nil, false, true
	}
	items, ok = f.d.sequence(e.value, join(f.m.path, name))
	return items, e.key, true, ok
}

// Mapping reads node n (a list item) at path as a mapping with the allowed keys.
func (f *Fields) Mapping(n *yaml.Node, path string, allowed []string) (*Fields, bool) {
	m, ok := f.d.mapping(n, nil, path, allowed, false)
	return &Fields{d: f.d, m: m}, ok
}

// Quote shows a value in a message, shortened so one bad line stays one line.
func Quote(s string) string { return quote(s) }

// Join builds a field path: Join("hosts[0]", "name") is hosts[0].name.
func Join(path, name string) string { return join(path, name) }

// Index builds a list item's field path: Index("hosts", 2) is hosts[2].
func Index(path string, i int) string { return index(path, i) }

// DNSLabelProblem says what is wrong with s as a DNS-1123 label (a namespace, a resource
// name), naming it as what; "" when s is one.
func DNSLabelProblem(what, s string) string { return labelProblem(what, s) }

// Paths reads a list of local paths (or glob patterns of them), as File reads one: relative
// ones are taken from the providers file's directory. Empty items and NUL bytes are problems;
// check, when set, says what else is wrong with one path as written ("" when it is valid).
// Only the valid paths are returned; ok is false when any item was not.
func (f *Fields) Paths(name string, check func(path string) string) (paths []string, present, ok bool) {
	items, _, present, ok := f.List(name)
	if !ok {
		return nil, present, false
	}
	for i, item := range items {
		field := index(join(f.m.path, name), i)
		v := f.d.resolve(item)
		if v == nil || v.Kind != yaml.ScalarNode || isNull(v) || v.ShortTag() == "!!bool" {
			f.d.add(v, field, "must be a string, got %s", describe(v))
			ok = false
			continue
		}
		s := v.Value
		switch {
		case s == "":
			f.d.add(v, field, "must not be empty")
			ok = false
			continue
		case strings.ContainsRune(s, 0):
			f.d.add(v, field, "a path must not contain a NUL byte")
			ok = false
			continue
		}
		if check != nil {
			if p := check(s); p != "" {
				f.d.add(v, field, "%s", p)
				ok = false
				continue
			}
		}
		if !filepath.IsAbs(s) {
			s = filepath.Join(f.d.baseDir, s)
		}
		paths = append(paths, s)
	}
	return paths, present, ok
}
