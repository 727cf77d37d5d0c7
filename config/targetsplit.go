package config

import (
	"bytes"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// A target file's memory. The YAML decoder builds a node tree (about 200 bytes a node) before
// anything in it can be counted, and a file of 16 MiB may hold 8 M nodes ("[a,a,a,...]"), so
// counting targets in the tree bounds nothing: 1.4 M short names allocated 414 MiB before
// --config.max-targets refused them. Two things bound it instead, both read from the bytes
// without building anything:
//
//   - nodeBound, an upper bound of the nodes a piece of YAML (or JSON) can decode into. A file
//     whose bound passes fileNodes(maxTargets) is refused before it is decoded, and no tree
//     decoded at once may pass treeNodes(maxTargets).
//   - A file is decoded a few groups (batchBytes) at a time when its groups can be told apart
//     from the bytes (targetItems): a YAML list written at column 0 ("- targets: ..."), or a
//     JSON array. Each batch is its own small tree, decoded, read into TargetGroup and
//     dropped, so a file of 100,000 one-target groups costs a batch's tree, not the file's. A
//     file written otherwise (a flow list, a list indented, a directive), or whose batch does
//     not decode on its own (an alias naming an anchor of an earlier batch, a syntax error),
//     is decoded whole, as before, and its bound must then fit treeNodes. A valid file is
//     decoded once; only a batch that fails sends the file to be decoded whole again.
//
// A streaming decoder would need no bound, but the YAML library has no public event API, and
// JSON decoded apart from YAML would place its problems differently; this keeps one decoder and
// one walk for both formats, and every problem at its file, line and column. FuzzTargetItems
// checks that a file read in batches reads as it does whole.

// nodesPerTarget and fileNodesPer scale the bounds with --config.max-targets: a group of up to
// the ceiling's targets, one a line or in a flow list, YAML or JSON, bounds to at most 3 nodes
// a target; a file of one group a target with about ten labels each to under 64. The file's
// bound, with at most --config.max-targets groups (groupReader.item), bounds what the groups
// and their labels keep once read.
const (
	nodesPerTarget = 4
	fileNodesPer   = 64
	// treeNodesMin is the bound every tree may have whatever the ceiling: a group's labels.
	treeNodesMin = 4096
)

// treeNodes is the most nodes nodeBound may allow one tree decoded at once (a group, or a file
// decoded whole) under a ceiling of maxTargets targets (0: none).
func treeNodes(maxTargets int) int {
	if maxTargets <= 0 {
		return 0
	}
	return nodesPerTarget*maxTargets + treeNodesMin
}

// fileNodes is the most nodes nodeBound may allow a whole target file under a ceiling of
// maxTargets targets (0: none): it bounds what the groups and their labels keep once read.
func fileNodes(maxTargets int) int {
	if maxTargets <= 0 {
		return 0
	}
	return fileNodesPer*maxTargets + treeNodesMin
}

// nodeBound is an upper bound of the nodes the YAML decoder builds from data, counted from its
// bytes. Every node starts at a token, and every token that can start a node begins at a byte
// after a blank, a flow indicator or a value indicator, or is an indicator itself; a node
// without bytes of its own (an empty value, a block collection's start) is charged to the
// indicator that makes it: "- " at most 2 (a list and its empty item), "? " and a ":" with
// nothing before it at most 3 (a mapping, an empty key and an empty value), a ":" after a key
// 2, ",", "[", "]", "{", "}" one each. Quoted text
// and comments are not skipped: a block scalar can hold a lone quote, so skipping could miss
// nodes, and counting their words only overcounts. FuzzNodeBound checks the bound against the
// decoder's trees.
func nodeBound(data []byte) int {
	n := 8 // a document node, an empty one's null, and a second document's (document reads two)
	// starts: the previous byte ends a token, so this one may start one. named: the current
	// word is an anchor, alias or tag, after whose name ":" and "?" are indicators.
	starts, named := true, false
	for i, c := range data {
		next := byte(' ')
		if i+1 < len(data) {
			next = data[i+1]
		}
		if blankByte(c) {
			starts, named = true, false
			continue
		}
		prevStarts := starts
		starts = false
		switch c {
		case ',', '[', ']', '{', '}':
			n++
			starts, named = true, false
		case '-':
			switch {
			case prevStarts && (blankByte(next) || flowByte(next)):
				n += 2
				starts = true
			case prevStarts:
				n++ // a plain scalar such as -1, or a document marker
			}
		case ':', '?':
			if prevStarts || named || quoteByte(data, i-1) || blankByte(next) || flowByte(next) {
				// An empty key only when nothing before it could be the key; after an anchor
				// or a tag, that word was counted for the empty key it decorates.
				n += 2
				if prevStarts || c == '?' {
					n++
				}
				starts = true
			}
		default:
			if prevStarts {
				n++
				named = c == '&' || c == '*' || c == '!'
			}
		}
	}
	return n
}

// blankByte: white space or a line break, or the last byte of a multi-byte break the decoder
// knows (NEL, LS, PS) or of a byte-order mark; a byte of other text that matches only counts
// more nodes.
func blankByte(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', 0x85, 0xA8, 0xA9, 0xBF:
		return true
	}
	return false
}

func flowByte(c byte) bool {
	switch c {
	case ',', '[', ']', '{', '}':
		return true
	}
	return false
}

func quoteByte(data []byte, i int) bool {
	return i >= 0 && (data[i] == '"' || data[i] == '\'')
}

// span is one group's bytes in a target file: data[start:end], starting at line and column.
type span struct {
	start, end   int
	line, column int
}

// targetItems splits a target file into its groups' spans when they can be told apart from
// the bytes alone; nil when they cannot (the file is then decoded whole). JSON must be valid
// (validJSON) before it is split.
func targetItems(data []byte, json bool) []span {
	if !plainBreaks(data) {
		return nil
	}
	if json {
		return jsonItems(data)
	}
	return yamlItems(data)
}

// yamlItems splits a YAML list written at column 0: a group starts at each line that starts
// with "-" and a blank, and runs to the next one. Every other line must be blank, a comment or
// indented (the group's own lines); a line at column 0 that is none of these (a document
// marker, a directive, a mapping key) leaves the file whole. No line at column 0 can continue
// a group's block content (it would be less indented than the group), so a group that decodes
// on its own decodes as it does in the file; one that does not (a quoted or flow value running
// over such a line, an alias of another group's anchor) is decoded with the whole file.
func yamlItems(data []byte) []span {
	var items []span
	line := 0
	for start := 0; start < len(data); {
		end := start
		for end < len(data) && data[end] != '\n' {
			end++
		}
		if end < len(data) {
			end++
		}
		line++
		l := data[start:end]
		switch {
		case l[0] == '-' && (len(l) == 1 || l[1] == ' ' || l[1] == '\t' || l[1] == '\n' || l[1] == '\r'):
			if len(items) > 0 {
				items[len(items)-1].end = start
			}
			items = append(items, span{start: start, end: len(data), line: line, column: 1})
		case l[0] == ' ' || l[0] == '#' || l[0] == '\n' || l[0] == '\r' && (len(l) == 1 || l[1] == '\n'):
			if l[0] == ' ' && len(items) == 0 && !blankLine(l) {
				return nil // indented content before the first group
			}
		default:
			return nil
		}
		start = end
	}
	if len(items) > 0 {
		// The first group takes the lines before it (comments): every byte is decoded.
		items[0].start, items[0].line = 0, 1
	}
	return items
}

// blankLine: only spaces, a comment or nothing.
func blankLine(l []byte) bool {
	for _, c := range l {
		switch c {
		case ' ', '\t', '\r', '\n':
		case '#':
			return true
		default:
			return false
		}
	}
	return true
}

// jsonItems splits a valid JSON array of objects and arrays into its elements; nil when data
// is not such an array (it is then decoded whole).
func jsonItems(data []byte) []span {
	var items []span
	line, lineStart := 1, 0
	depth := 0
	inString, escaped := false, false
	for i, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '\n':
			line, lineStart = line+1, i+1
		case ' ', '\t', '\r', ',', ':':
		case '[', '{':
			switch depth {
			case 0:
				if c == '{' {
					return nil
				}
			case 1:
				// The decoder counts columns in characters.
				items = append(items, span{start: i, line: line, column: utf8.RuneCount(data[lineStart:i]) + 1})
			}
			depth++
		case ']', '}':
			depth--
			if depth == 1 {
				items[len(items)-1].end = i + 1
			}
		default:
			if depth <= 1 {
				return nil // a scalar, or a scalar as a group
			}
			inString = c == '"'
		}
	}
	return items
}

// plainBreaks reports whether every line break of data is "\n" or "\r\n": the splitters count
// lines by "\n", the decoder also by a lone "\r" and by NEL, LS and PS (which JSON allows in a
// string). A file with other breaks is decoded whole.
func plainBreaks(data []byte) bool {
	for _, b := range [][]byte{[]byte("\u0085"), []byte("\u2028"), []byte("\u2029")} {
		if bytes.Contains(data, b) {
			return false
		}
	}
	for i := bytes.IndexByte(data, '\r'); i >= 0; {
		if i+1 >= len(data) || data[i+1] != '\n' {
			return false
		}
		j := bytes.IndexByte(data[i+1:], '\r')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return true
}

// shift moves the positions of a tree decoded from a span to the span's place in the file.
func shift(root *yaml.Node, s span) {
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil {
			continue
		}
		if n.Line == 1 {
			n.Column += s.column - 1
		}
		n.Line += s.line - 1
		stack = append(stack, n.Content...)
	}
}
