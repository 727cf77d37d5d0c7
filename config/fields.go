package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Fields is one mapping of the providers file as a provider type's decoder sees it: a type
// block, or a mapping inside it (a list item). Its keys are already checked against the
// allowed ones (an unknown or duplicate key is reported), and merge keys are flattened. Every
// reader returns the value with its default applied, and records what is wrong with it at its
// file, line and column, naming the field and what is allowed; the decoder goes on, so that
// every problem of the file is reported at once (the loader drops a block that has one, and
// Problems tells a decoder whether a part of it had). The *Node variants and List also give
// the YAML node, for a decoder that places a problem of its own; Has and Key tell an absent
// key from an empty value.
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
func (f *Fields) Problems() int { return f.d.problems }

// Check says what is wrong with a value a reader read, "" when it is valid: TargetNameProblem,
// or a type's own rule. A reader runs its checks on a value that is not empty, in order, and
// records the first problem at the value, under the field's path, as it records its own. A value
// a check refuses is still returned (a list leaves the item out): the loader drops the block, and
// the decoder's later rules still see what the file says.
type Check func(value string) string

// String reads a string field: "" when absent or null. A number is taken as written; a boolean,
// a list or a mapping is a problem.
func (f *Fields) String(name string, check ...Check) string {
	s, _ := f.StringNode(name, check...)
	return s
}

// StringNode is String with the value's node, nil when the key is absent: for a decoder that
// places a problem of its own at the value, or remembers its line.
func (f *Fields) StringNode(name string, check ...Check) (string, *yaml.Node) {
	s, v, ok := f.d.str(f.m, name)
	if ok {
		f.d.checked(v, join(f.m.path, name), s, check)
	}
	return s, v
}

// Required reads a string field that must be present and not empty; hint is added to the
// problem (" (host, host:port or [v6]:port)").
func (f *Fields) Required(name, hint string, check ...Check) string {
	s, _ := f.RequiredNode(name, hint, check...)
	return s
}

// RequiredNode is Required with the value's node (nil when the key is absent).
func (f *Fields) RequiredNode(name, hint string, check ...Check) (string, *yaml.Node) {
	s, v, ok := f.d.required(f.m, name, hint)
	if ok {
		f.d.checked(v, join(f.m.path, name), s, check)
	}
	return s, v
}

// Int reads an integer field within [lo, hi] (math.MaxInt32: no upper bound); absent or null
// is def, and so is a value that is a problem, so that the rules that depend on it see a valid
// one.
func (f *Fields) Int(name string, def, lo, hi int) int { return f.d.intIn(f.m, name, def, lo, hi) }

// Bool reads a true/false field; absent or null is false.
func (f *Fields) Bool(name string) bool {
	b, _ := f.d.boolean(f.m, name)
	return b
}

// File reads a local file path: relative paths are taken from the providers file's directory.
// The file is not opened: the checker that uses it reads it. "" when absent (a problem when
// required; hint is added to it).
func (f *Fields) File(name string, required bool, hint string) string {
	return f.d.filePath(f.m, name, required, hint)
}

// Duration reads a Go duration (2s, 500ms) within [lo, hi]; absent, null or empty is def, and
// so is a value that is a problem (as for Int).
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
		return def
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

// Strings reads a list of plain strings: absent or null is none. An item that is not a string,
// or is empty, is a problem; only the items every check accepts are returned.
func (f *Fields) Strings(name string, check ...Check) []string {
	var out []string
	for _, it := range f.d.stringItems(f.m, name, check) {
		out = append(out, it.value)
	}
	return out
}

// Paths reads a list of local paths (or glob patterns of them), as Strings reads a list and
// File reads one path: relative ones are taken from the providers file's directory, and a NUL
// byte is a problem. Only the valid paths are returned.
func (f *Fields) Paths(name string, check ...Check) []string {
	var paths []string
	for _, it := range f.d.stringItems(f.m, name, append([]Check{nulProblem}, check...)) {
		paths = append(paths, f.d.abs(it.value))
	}
	return paths
}

// Addresses reads a list of network addresses (ParseAddress), as Strings reads a list, and
// returns each as host:port to dial, with defaultPort when it carries none (0: each must carry
// a port). The checks see the address as written. The same host and port twice is a problem.
// Only the valid addresses are returned, in the file's order.
func (f *Fields) Addresses(name string, defaultPort int, check ...Check) []string {
	var addrs []string
	seen := map[string]int{} // host:port, lower case -> line of its first use
	parse := func(s string) string {
		_, _, p := ParseAddress(s, defaultPort)
		return p
	}
	for _, it := range f.d.stringItems(f.m, name, append([]Check{parse}, check...)) {
		addr := DialAddress(it.value, defaultPort)
		if first, dup := seen[strings.ToLower(addr)]; dup {
			f.d.add(it.node, it.field, "duplicate address %s (first listed at line %d)", quote(it.value), first)
			continue
		}
		seen[strings.ToLower(addr)] = it.node.Line
		addrs = append(addrs, addr)
	}
	return addrs
}
