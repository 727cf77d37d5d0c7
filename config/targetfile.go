package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// Target files: lists of targets in Prometheus's file_sd format, which a type that reads its
// targets from an inventory (kvm's hostFiles) names with globs. The format is Prometheus's, so
// that what an inventory already writes for Prometheus serves here too:
//
//	- targets: ["kvm-1.example.net:22", "kvm-2.example.net"]
//	  labels: {rack: r12, site: fra1}
//
// JSON (a file ending in .json) or YAML (.yml, .yaml). Labels follow the labels maps' rules
// (LabelNameProblem; the maintenance label's values); every problem is placed at its file, line
// and column.

// TargetFileExtensions are the endings a target file (and the glob naming it) must have; the
// ending chooses the format.
var TargetFileExtensions = []string{".json", ".yml", ".yaml"}

// targetGroupFields are the keys of one group.
var targetGroupFields = []string{"targets", "labels"}

// TargetGroup is one group of a target file: targets and the labels they share.
type TargetGroup struct {
	// Targets are the group's targets as written (for kvm, host or host:port).
	Targets []string
	// Lines are the lines of Targets in the file, same order, for messages.
	Lines []int
	// Labels are the group's labels; nil when it has none.
	Labels map[string]string
}

// TargetFilePatternProblem says what is wrong with a glob naming target files; "" when it is
// valid. Patterns follow filepath.Match; the ending must be one of TargetFileExtensions.
func TargetFilePatternProblem(pattern string) string {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return fmt.Sprintf("invalid pattern %s: %v (patterns follow Go's filepath.Match: *, ?, [a-z])", quote(pattern), err)
	}
	if !slices.Contains(TargetFileExtensions, strings.ToLower(filepath.Ext(pattern))) {
		return fmt.Sprintf("invalid pattern %s: must end in %s (Prometheus's file_sd format, JSON or YAML by the ending)",
			quote(pattern), strings.Join(TargetFileExtensions, ", "))
	}
	return ""
}

// ReadTargetFile reads the target file at path: ParseTargetFile of its content. A file that
// cannot be read returns the read error: one that is not a regular file (a named pipe, a
// socket, a device) or is larger than maxSize bytes is refused before it is parsed (fileread).
// A file of more than maxTargets targets or groups (0: no ceiling) is refused, its first target
// or group beyond the ceiling named; so is one whose YAML may decode into more nodes than the
// ceiling allows, before it is decoded (nodeBound: its parse's memory follows the ceiling).
func ReadTargetFile(path string, maxSize int64, maxTargets int, targetProblem func(string) string) ([]TargetGroup, error) {
	data, err := fileread.Read(path, maxSize)
	if err != nil {
		return nil, withFlag(err, FlagTargetFileMaxSize)
	}
	return parseTargetFile(path, data, targetProblem, maxTargets)
}

// ParseTargetFile validates data as a target file named name (its ending chooses JSON or
// YAML). targetProblem says what is wrong with one target ("" when it is valid; nil accepts
// any non-empty string). An empty file is a valid file without groups. On failure the error is
// Errors, every problem of the file sorted by position; the groups are then nil.
func ParseTargetFile(name string, data []byte, targetProblem func(string) string) ([]TargetGroup, error) {
	return parseTargetFile(name, data, targetProblem, 0)
}

func parseTargetFile(name string, data []byte, targetProblem func(string) string, maxTargets int) ([]TargetGroup, error) {
	d := &decoder{file: name, maxTargets: maxTargets}
	groups := d.targetFile(data, targetProblem)
	if err := d.result(); err != nil {
		return nil, err
	}
	return groups, nil
}

func (d *decoder) targetFile(data []byte, targetProblem func(string) string) []TargetGroup {
	ext := strings.ToLower(filepath.Ext(d.file))
	if !slices.Contains(TargetFileExtensions, ext) {
		d.add(nil, "", "a target file must end in %s (Prometheus's file_sd format)", strings.Join(TargetFileExtensions, ", "))
		return nil
	}
	if ext == ".json" && !d.validJSON(data) {
		return nil
	}
	if empty(data) {
		return nil
	}
	bound := nodeBound(data)
	if most := fileNodes(d.maxTargets); most > 0 && bound > most {
		d.tooManyNodes(nil, "", "the file", bound, most)
		return nil
	}
	r := &groupReader{d: d, targetProblem: targetProblem, seen: map[string]int{}}
	if items := targetItems(data, ext == ".json"); items != nil {
		groups, bad, ok := r.items(data, items, ext == ".json")
		if ok {
			return groups
		}
		// A group does not decode on its own: the file is decoded whole, from the start, when
		// it may be; else the group's own problem is the file's.
		*d = decoder{file: d.file, maxTargets: d.maxTargets}
		r = &groupReader{d: d, targetProblem: targetProblem, seen: map[string]int{}}
		if most := treeNodes(d.maxTargets); most > 0 && bound > most {
			part := data[bad.start:bad.end]
			msg := parseProblem(part)
			line := failingLine(part, msg)
			if line > 0 {
				line += bad.line - 1
			}
			if msg == "" || strings.Contains(msg, "anchor") {
				msg += " (a file this large is decoded a few groups at a time: an alias may name an anchor of its own group only)"
			}
			d.full()
			d.record(FieldError{File: d.file, Line: line, Msg: "invalid YAML: " + strings.TrimPrefix(msg, " ")})
			return nil
		}
	}
	if most := treeNodes(d.maxTargets); most > 0 && bound > most {
		d.tooManyNodes(nil, "", "the file, decoded whole (its groups cannot be told apart from its bytes),", bound, most)
		return nil
	}
	return r.whole(data)
}

// whole reads the groups of the file decoded whole.
func (r *groupReader) whole(data []byte) []TargetGroup {
	root := r.d.document(data)
	if root == nil {
		return nil
	}
	r.d.bounded(root, func() { r.root(root) })
	return r.groups
}

// tooManyNodes records a refusal by nodeBound: what (the file, or one of its groups) may
// decode into bound nodes, more than most.
func (d *decoder) tooManyNodes(n *yaml.Node, field, what string, bound, most int) {
	d.add(n, field, "%s may decode into up to %d YAML nodes (counted from its bytes), more than the %d that --%s=%d allows: it is refused before it is decoded, and its provider keeps the targets of its last good read; split the fleet between files or providers, or raise the flag",
		what, bound, most, FlagMaxTargets, d.maxTargets)
}

// groupReader reads the groups of one target file, group by group: the targets seen so far
// (a duplicate is a problem), the count against the ceiling, and the groups read.
type groupReader struct {
	d             *decoder
	targetProblem func(string) string
	seen          map[string]int // target -> line of its first use
	taken         int
	groups        []TargetGroup
	// done: the ceiling was passed; nothing more is read.
	done bool
}

// batchBytes is how many bytes of consecutive groups are decoded together (one group larger
// than it alone): a decoder's own buffers cost about 12 KB, too much to pay a group.
const batchBytes = 64 << 10

// items reads the groups from their spans, decoded a batch of consecutive groups at a time,
// each group under treeNodes (json: the spans are a JSON array's elements, else a YAML list's
// items). ok is false when a batch does not decode on its own: bad is its span, and nothing
// is recorded for the file.
func (r *groupReader) items(data []byte, items []span, json bool) (groups []TargetGroup, bad span, ok bool) {
	d := r.d
	most := treeNodes(d.maxTargets)
	i := 0 // the index of the batch's first group in the file
	for k := 0; k < len(items); {
		j := k
		for ; j < len(items) && (j == k || items[j].end-items[k].start <= batchBytes); j++ {
			s := items[j]
			if bound := nodeBound(data[s.start:s.end]); most > 0 && bound > most {
				if j == k {
					d.tooManyNodes(&yaml.Node{Line: s.line, Column: s.column}, index("", i), "this group", bound, most)
					return nil, span{}, true
				}
				break // the batch ends before it
			}
		}
		batch := span{start: items[k].start, end: items[j-1].end, line: items[k].line, column: items[k].column}
		part := data[batch.start:batch.end]
		wrapped := json && j-k > 1
		if wrapped {
			// A JSON batch is decoded as a list of its elements, one column to the left.
			part = append(append([]byte{'['}, part...), ']')
			batch.column--
		}
		root := decodeAlone(part)
		nodes := []*yaml.Node{root} // one JSON element: the group itself
		if !json || wrapped {
			if root == nil || root.Kind != yaml.SequenceNode || len(root.Content) != j-k {
				root = nil
			} else {
				nodes = root.Content
			}
		}
		if root == nil {
			batch.column = items[k].column
			return nil, batch, false
		}
		shift(root, batch)
		if !d.bounded(root, func() {
			for _, n := range nodes {
				if r.item(i, n); r.done {
					return
				}
				i++
			}
		}) || r.done {
			return nil, span{}, true
		}
		k = j
	}
	return r.groups, span{}, true
}

// decodeAlone decodes part as a single document; nil when it does not decode so (a syntax
// error, an alias of an anchor outside it, another document).
func decodeAlone(part []byte) (root *yaml.Node) {
	defer func() {
		if recover() != nil {
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(part))
	var doc, next yaml.Node
	if dec.Decode(&doc) != nil || !errors.Is(dec.Decode(&next), io.EOF) ||
		doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0] == nil {
		return nil
	}
	return doc.Content[0]
}

// root reads the groups of a target file's root node, the file decoded whole.
func (r *groupReader) root(root *yaml.Node) {
	d := r.d
	n := d.resolve(root)
	if isNull(n) {
		return
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		d.add(n, "", "a target file is a list of groups ({targets: [...], labels: {...}}), got %s", describe(n))
		return
	}
	for i, item := range n.Content {
		if r.item(i, item); r.done {
			return
		}
	}
}

// item reads the group at index i of the file.
func (r *groupReader) item(i int, item *yaml.Node) {
	d := r.d
	path := index("", i)
	if d.maxTargets > 0 && i >= d.maxTargets {
		// Groups without targets would otherwise cost memory no target ceiling bounds.
		d.add(item, path, "more than %d groups in this file (--%s): the file is refused and its provider keeps the targets of its last good read",
			d.maxTargets, FlagMaxTargets)
		r.done = true
		return
	}
	m, ok := d.mapping(item, nil, path, targetGroupFields, false)
	if !ok {
		return
	}
	g := TargetGroup{}
	if labels, ok := d.labels(m); ok {
		g.Labels = labels
	}
	e, present := m.fields["targets"]
	if !present {
		d.add(m.where, join(path, "targets"), "missing required field (a list of targets)")
		return
	}
	ts, ok := d.sequence(e.value, join(path, "targets"))
	if !ok {
		return
	}
	for j, tn := range ts {
		field := index(join(path, "targets"), j)
		tn = d.resolve(tn)
		if tn == nil || tn.Kind != yaml.ScalarNode || isNull(tn) || tn.ShortTag() == "!!bool" {
			d.add(tn, field, "a target must be a string, got %s", describe(tn))
			continue
		}
		t := tn.Value
		switch {
		case t == "":
			d.add(tn, field, "a target must not be empty")
			continue
		case r.targetProblem != nil:
			if p := r.targetProblem(t); p != "" {
				d.add(tn, field, "%s", p)
				continue
			}
		}
		if p := TargetNameProblem(t); p != "" {
			d.add(tn, field, "%s", p)
			continue
		}
		if first, dup := r.seen[t]; dup {
			d.add(tn, field, "duplicate target %s (first listed at line %d)", quote(t), first)
			continue
		}
		if r.taken++; d.maxTargets > 0 && r.taken > d.maxTargets {
			d.add(tn, field, "more than %d targets in this file (--%s): the file is refused and its provider keeps the targets of its last good read; split the fleet between providers, or raise the flag",
				d.maxTargets, FlagMaxTargets)
			r.done = true
			return
		}
		r.seen[t] = tn.Line
		g.Targets = append(g.Targets, t)
		g.Lines = append(g.Lines, tn.Line)
	}
	r.groups = append(r.groups, g)
}

// empty reports whether data holds no YAML document at all: only white space and comments.
// It reads lines, never a tree, so that a file is parsed into a tree once (document).
func empty(data []byte) bool {
	for line := range bytes.Lines(data) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

// validJSON records a JSON syntax error at its line and column (YAML would accept more than
// JSON does, and Prometheus reads a .json file as JSON).
func (d *decoder) validJSON(data []byte) bool {
	if len(bytes.TrimSpace(data)) == 0 {
		return true
	}
	// json.Valid builds nothing: a valid file (the usual case) is parsed into a tree once, by
	// the YAML decoder; only an invalid one is decoded again, for its error's position.
	if json.Valid(data) {
		return true
	}
	var v any
	err := json.Unmarshal(data, &v)
	if err == nil {
		return true
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		d.full()
		d.record(FieldError{File: d.file, Line: line, Column: col, Msg: "invalid JSON: " + se.Error()})
		return false
	}
	d.full()
	d.record(FieldError{File: d.file, Msg: "invalid JSON: " + err.Error()})
	return false
}

// position turns the offset just past the byte where a JSON error was found into a line and
// a column, 1-based.
func position(data []byte, offset int64) (line, col int) {
	offset = min(max(offset-1, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}
