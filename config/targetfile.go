package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
// A file of more than maxTargets targets (0: no ceiling) is refused, its first target beyond the
// ceiling named.
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

func (d *decoder) targetFile(data []byte, targetProblem func(string) string) (groups []TargetGroup) {
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
	root := d.document(data)
	if root == nil {
		return nil
	}
	if !d.bounded(root, func() { groups = d.targetGroups(root, targetProblem) }) {
		return nil
	}
	return groups
}

// targetGroups reads the groups of a target file's root node.
func (d *decoder) targetGroups(root *yaml.Node, targetProblem func(string) string) (groups []TargetGroup) {
	r := d.resolve(root)
	if isNull(r) {
		return nil
	}
	if r == nil || r.Kind != yaml.SequenceNode {
		d.add(r, "", "a target file is a list of groups ({targets: [...], labels: {...}}), got %s", describe(r))
		return nil
	}
	items := r.Content
	seen := map[string]int{} // target -> line of its first use
	taken := 0
	for i, item := range items {
		path := index("", i)
		m, ok := d.mapping(item, nil, path, targetGroupFields, false)
		if !ok {
			continue
		}
		g := TargetGroup{}
		if labels, ok := d.labels(m); ok {
			g.Labels = labels
		}
		e, present := m.fields["targets"]
		if !present {
			d.add(m.where, join(path, "targets"), "missing required field (a list of targets)")
			continue
		}
		ts, ok := d.sequence(e.value, join(path, "targets"))
		if !ok {
			continue
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
			case targetProblem != nil:
				if p := targetProblem(t); p != "" {
					d.add(tn, field, "%s", p)
					continue
				}
			}
			if p := TargetNameProblem(t); p != "" {
				d.add(tn, field, "%s", p)
				continue
			}
			if first, dup := seen[t]; dup {
				d.add(tn, field, "duplicate target %s (first listed at line %d)", quote(t), first)
				continue
			}
			if taken++; d.maxTargets > 0 && taken > d.maxTargets {
				d.add(tn, field, "more than %d targets in this file (--%s): the file is refused and its provider keeps the targets of its last good read; split the fleet between providers, or raise the flag",
					d.maxTargets, FlagMaxTargets)
				return nil
			}
			seen[t] = tn.Line
			g.Targets = append(g.Targets, t)
			g.Lines = append(g.Lines, tn.Line)
		}
		groups = append(groups, g)
	}
	return groups
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
