package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

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

// Errors is every problem of one file, all reported at once, sorted by line and column.
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
