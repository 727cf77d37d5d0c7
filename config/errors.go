package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The ceilings of a file's problems: a file reports at most MaxProblems of them (the first
// found, which follow the file), followed by one line counting the rest, in every place it is shown
// (--config.check, logs, the status page and its API, reload answers); one message is at most
// MaxMessageLen bytes.
const (
	MaxProblems   = 20
	MaxMessageLen = 2048
)

// clip cuts s to at most n bytes at a UTF-8 boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// FieldError is one problem of the providers file, placed at its line and column.
type FieldError struct {
	// File is the providers file's name as given to Load or Parse.
	File string
	// Line and Column are 1-based; 0 when the YAML parser could not tell (some syntax errors).
	Line, Column int
	// Field is the path of the field, e.g. providers[2].kvm.hosts[0].address; empty for a
	// problem of the file as a whole (syntax, several documents).
	Field string
	// Msg says what is wrong and what is allowed.
	Msg string
}

// Error returns "FILE:LINE:COL: FIELD: MSG"; the parts that are unknown (a column the parser
// did not report, a problem that belongs to no field) are left out.
func (e FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":" + strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is the problems of one file, all reported at once (up to MaxProblems, then a last
// entry without a position saying how many more there are), sorted by line and column.
type Errors []FieldError

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sortErrors orders by position; problems on the same spot keep the order they were found in,
// which follows the file.
func sortErrors(es Errors) {
	slices.SortStableFunc(es, func(a, b FieldError) int {
		if c := cmp.Compare(a.Line, b.Line); c != 0 {
			return c
		}
		return cmp.Compare(a.Column, b.Column)
	})
}
