package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The file is walked as a yaml.Node tree rather than unmarshalled into the Go types: that is what
// gives every problem a line and a column, lets every problem of the file be reported at once,
// and tells an absent key from an empty one (labelSelector and filter default only when absent).

// aliasBudget is how many node visits aliases may add beyond the file's own nodes. A few bytes of
// aliases can stand for a very large document; the walk stops there instead of running away.
const aliasBudget = 100_000

// errBudget unwinds the walk when the alias budget is spent.
var errBudget = errors.New("the file expands to too many nodes through anchors and aliases")

type decoder struct {
	file    string
	baseDir string
	// errs are the first MaxProblems problems found; problems counts them all.
	errs     Errors
	problems int
	budget   int
	// aliasSpent is the alias budget the parts of a file decoded before this one spent.
	aliasSpent int
	// roundTimeout is the deadline of one round of checks (0: not checked), which every kvm
	// provider's HostBound must fit.
	roundTimeout time.Duration
	// maxTargets bounds the targets of a target file (0: none).
	maxTargets int
}

// entry is one key of a mapping and its value.
type entry struct {
	key, value *yaml.Node
}

// mapping is a mapping of the file, its keys checked against the allowed ones and merge keys
// (`<<: *anchor`) flattened.
type mapping struct {
	path string
	// where places problems about the mapping as a whole (a missing field): the key that holds
	// the mapping when there is one, else the mapping itself.
	where  *yaml.Node
	fields map[string]entry
}

func (d *decoder) add(n *yaml.Node, field, format string, args ...any) {
	if d.full() {
		return
	}
	var line, col int
	if n != nil {
		line, col = n.Line, n.Column
	}
	d.record(FieldError{File: d.file, Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// full counts one more problem and reports whether it is past the ceiling (MaxProblems): such
// a problem is counted, never formatted or kept, so that a file of a million problems costs
// no more memory than one of MaxProblems.
func (d *decoder) full() bool {
	d.problems++
	return len(d.errs) >= MaxProblems
}

// record keeps a problem counted by full, its message cut at MaxMessageLen.
func (d *decoder) record(e FieldError) {
	e.Msg = clip(e.Msg, MaxMessageLen)
	e.Field = clip(e.Field, MaxMessageLen/4)
	d.errs = append(d.errs, e)
}

// result is the file's problems, sorted by position, the count of those left out last; nil
// when there are none.
func (d *decoder) result() error {
	if d.problems == 0 {
		return nil
	}
	sortErrors(d.errs)
	if more := d.problems - len(d.errs); more > 0 {
		return append(d.errs, FieldError{File: d.file, Msg: fmt.Sprintf("and %d more problems (the first %d are shown)", more, len(d.errs))})
	}
	return d.errs
}

// resolve follows an alias to the node it names and charges the visit to the budget.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	// An alias never names another alias (YAML has no anchors on aliases); the bound only
	// guards against a hand-built tree.
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		n = nil
	}
	d.budget--
	if d.budget < 0 {
		panic(errBudget)
	}
	return n
}

// join builds a field path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// quote shows a value in a message, shortened so one bad line stays one line.
func quote(s string) string {
	const max = 64
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "..."
	}
	return strconv.Quote(s)
}

// describe names what a node is, for "must be X, got Y" messages.
func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "boolean " + n.Value
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!str":
			return "string " + quote(n.Value)
		default:
			return tag + " " + quote(n.Value)
		}
	}
	return "an unknown node"
}

func isNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

var yamlLine = regexp.MustCompile(`^line \d+: `)

// problem is a YAML error's text without the library's prefix and line.
func problem(err error) string {
	return yamlLine.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: "), "")
}

// syntax records a YAML syntax error. The parser's own line is unreliable (for many errors it
// names the line before the enclosing block), so the line is found again: the shortest run of
// leading lines that fails with the same problem ends on the line where the parser found it.
func (d *decoder) syntax(data []byte, msg string) {
	if d.full() {
		return
	}
	d.record(FieldError{File: d.file, Line: failingLine(data, msg), Msg: "invalid YAML: " + msg})
}

// parseProblem parses every document of data and returns the first problem, "" when none.
func parseProblem(data []byte) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return problem(err)
		}
	}
}

// failingLine finds by bisection the first line k such that lines 1..k fail with msg; 0 when
// the problem does not show on a prefix at all.
func failingLine(data []byte, msg string) int {
	ends := []int{} // ends[k-1]: the offset just past line k
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	lo, hi := 1, len(ends)
	if parseProblem(data) != msg {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if parseProblem(data[:ends[mid-1]]) == msg {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// document parses data into the root node of its only document, or records why it cannot.
func (d *decoder) document(data []byte) (root *yaml.Node) {
	defer func() {
		// The YAML library reports some malformed input by panicking with its own internal
		// errors; a bad file must never take the exporter down.
		if r := recover(); r != nil {
			d.syntax(data, fmt.Sprint(r))
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.add(nil, "", "the file is empty: expected a mapping with a providers key (providers: [] for none)")
		} else {
			d.syntax(data, problem(err))
		}
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(data, problem(err))
		return nil
	default:
		d.add(&next, "", "a second YAML document starts here; the file is a single document")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0] == nil {
		d.add(&doc, "", "expected one YAML document")
		return nil
	}
	return doc.Content[0]
}

// countNodes counts the nodes of the tree without following aliases, without recursion (the
// parser allows deep nesting).
func countNodes(root *yaml.Node) int {
	n := 0
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if top == nil {
			continue
		}
		n++
		stack = append(stack, top.Content...)
	}
	return n
}

// mapping checks that n is a mapping whose keys are all allowed and returns its fields. where
// places "missing field" problems (nil: the mapping itself). A null value is an empty mapping
// when nullOK. ok is false when n is not a mapping; the problem is recorded.
func (d *decoder) mapping(n, where *yaml.Node, path string, allowed []string, nullOK bool) (*mapping, bool) {
	n = d.resolve(n)
	if where == nil {
		where = n
	}
	m := &mapping{path: path, where: where, fields: map[string]entry{}}
	if nullOK && isNull(n) {
		return m, true
	}
	if n == nil || n.Kind != yaml.MappingNode {
		d.add(n, path, "must be a mapping, got %s", describe(n))
		return m, false
	}
	d.collect(n, m, allowed, true, map[*yaml.Node]bool{n: true})
	return m, true
}

// collect adds n's keys to m. Keys written in the mapping itself (explicit) win over merged ones,
// and of several merged mappings the first wins, as YAML's merge key defines.
func (d *decoder) collect(n *yaml.Node, m *mapping, allowed []string, explicit bool, visited map[*yaml.Node]bool) {
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.add(k, m.path, "a key must be a string, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		field := join(m.path, k.Value)
		if !slices.Contains(allowed, k.Value) {
			d.add(k, field, "unknown field (allowed: %s)", strings.Join(allowed, ", "))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.add(k, field, "duplicate key (first at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		if _, set := m.fields[k.Value]; explicit || !set {
			m.fields[k.Value] = entry{key: k, value: v}
		}
	}
	for _, v := range merges {
		v = d.resolve(v)
		var sources []*yaml.Node
		switch {
		case v != nil && v.Kind == yaml.MappingNode:
			sources = []*yaml.Node{v}
		case v != nil && v.Kind == yaml.SequenceNode:
			for _, s := range v.Content {
				sources = append(sources, d.resolve(s))
			}
		}
		if len(sources) == 0 {
			d.add(v, join(m.path, "<<"), "a merge key takes a mapping or a list of mappings, got %s", describe(v))
			continue
		}
		for _, s := range sources {
			if s == nil || s.Kind != yaml.MappingNode {
				d.add(s, join(m.path, "<<"), "a merge key takes a mapping or a list of mappings, got %s", describe(s))
				continue
			}
			// A mapping merged twice adds nothing new; a mapping that merges itself (an anchor
			// may name its own enclosing node) would otherwise never end.
			if visited[s] {
				continue
			}
			visited[s] = true
			d.collect(s, m, allowed, false, visited)
		}
	}
}

// sequence returns the items of a list; null is an empty list.
func (d *decoder) sequence(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = d.resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		d.add(n, path, "must be a list, got %s", describe(n))
		return nil, false
	}
	return n.Content, true
}

// str reads a string field. v is nil when the key is absent; null is the empty string. A number
// is taken as written; a boolean, a list or a mapping is a type error (ok false, recorded).
func (d *decoder) str(m *mapping, name string) (s string, v *yaml.Node, ok bool) {
	e, present := m.fields[name]
	if !present {
		return "", nil, true
	}
	v = d.resolve(e.value)
	if v == nil {
		d.add(e.key, join(m.path, name), "must be a string, got %s", describe(v))
		return "", e.key, false
	}
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!null":
			return "", v, true
		case "!!str", "!!int", "!!float", "!!timestamp":
			return v.Value, v, true
		case "!!bool":
			d.add(v, join(m.path, name), "must be a string, got %s (quote it to mean the text)", describe(v))
			return "", v, false
		}
	}
	d.add(v, join(m.path, name), "must be a string, got %s", describe(v))
	return "", v, false
}

// required reads a string field that must be present and not empty.
func (d *decoder) required(m *mapping, name, hint string) (string, *yaml.Node, bool) {
	s, v, ok := d.str(m, name)
	switch {
	case !ok:
		return "", v, false
	case v == nil:
		d.add(m.where, join(m.path, name), "missing required field%s", hint)
		return "", nil, false
	case s == "":
		d.add(v, join(m.path, name), "must not be empty%s", hint)
		return "", v, false
	}
	return s, v, true
}

// checked runs checks on s, a value of field at v that is not empty, and records the first
// problem at v. It reports whether every check accepted s.
func (d *decoder) checked(v *yaml.Node, field, s string, checks []Check) bool {
	if s == "" {
		return true
	}
	for _, c := range checks {
		if p := c(s); p != "" {
			d.add(v, field, "%s", p)
			return false
		}
	}
	return true
}

// item is one string of a list, with its node and field path.
type item struct {
	value, field string
	node         *yaml.Node
}

// stringItems reads a list of strings: its items that are strings, not empty, and that every
// check accepts. Every other item is a problem; so is a value that is not a list.
func (d *decoder) stringItems(m *mapping, name string, checks []Check) []item {
	e, present := m.fields[name]
	if !present {
		return nil
	}
	path := join(m.path, name)
	nodes, _ := d.sequence(e.value, path)
	var items []item
	for i, n := range nodes {
		field := index(path, i)
		v := d.resolve(n)
		switch {
		case v == nil || v.Kind != yaml.ScalarNode || isNull(v) || v.ShortTag() == "!!bool":
			d.add(v, field, "must be a string, got %s", describe(v))
		case v.Value == "":
			d.add(v, field, "must not be empty")
		case d.checked(v, field, v.Value, checks):
			items = append(items, item{value: v.Value, field: field, node: v})
		}
	}
	return items
}

// nulProblem refuses a path with a NUL byte: no file has one.
func nulProblem(path string) string {
	if strings.ContainsRune(path, 0) {
		return "a path must not contain a NUL byte"
	}
	return ""
}

// abs takes a relative path from the providers file's directory.
func (d *decoder) abs(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(d.baseDir, path)
}

// intIn reads an integer field within [lo, hi] (hi math.MaxInt32: no upper bound); absent,
// null or not valid is def.
func (d *decoder) intIn(m *mapping, name string, def, lo, hi int) int {
	n, v, set, ok := d.integer(m, name)
	switch {
	case !ok || !set:
		return def
	case n < lo || n > hi:
		allowed := fmt.Sprintf("%d-%d", lo, hi)
		if hi == math.MaxInt32 {
			allowed = fmt.Sprintf("%d or more", lo)
		}
		d.add(v, join(m.path, name), "%s %d is out of range (allowed: %s)", name, n, allowed)
		return def
	}
	return n
}

// integer reads an integer field; absent or null reports set false.
func (d *decoder) integer(m *mapping, name string) (i int, v *yaml.Node, set, ok bool) {
	e, present := m.fields[name]
	if !present {
		return 0, nil, false, true
	}
	v = d.resolve(e.value)
	if isNull(v) {
		return 0, v, false, true
	}
	if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		d.add(v, join(m.path, name), "must be an integer, got %s", describe(v))
		return 0, v, false, false
	}
	var x int32
	if err := v.Decode(&x); err != nil {
		d.add(v, join(m.path, name), "integer %s is out of range", v.Value)
		return 0, v, false, false
	}
	return int(x), v, true, true
}

// boolean reads a true/false field; absent or null is false.
func (d *decoder) boolean(m *mapping, name string) (b bool, ok bool) {
	e, present := m.fields[name]
	if !present {
		return false, true
	}
	v := d.resolve(e.value)
	if isNull(v) {
		return false, true
	}
	if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
		d.add(v, join(m.path, name), "must be true or false, got %s", describe(v))
		return false, false
	}
	if err := v.Decode(&b); err != nil {
		d.add(v, join(m.path, name), "must be true or false, got %s", describe(v))
		return false, false
	}
	return b, true
}

// filePath reads a local file path field: relative paths are taken from the providers file's
// directory. The file itself is not opened here; the checker that uses it reads it.
func (d *decoder) filePath(m *mapping, name string, required bool, hint string) string {
	var s string
	var v *yaml.Node
	var ok bool
	if required {
		s, v, ok = d.required(m, name, hint)
	} else {
		s, v, ok = d.str(m, name)
	}
	if !ok || s == "" || !d.checked(v, join(m.path, name), s, []Check{nulProblem}) {
		return ""
	}
	return d.abs(s)
}
