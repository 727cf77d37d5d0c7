// Command chartdoc writes the Helm chart's README.md (charts/provider-health-exporter/README.md,
// what `helm show readme` and artifacthub show) from Chart.yaml, from values.yaml's comments
// (the comment above a key documents it, and every value is listed with its default) and from
// files/types.yaml (the provider types' credentials Secrets, written by scripts/gentypes,
// which `make generate` runs first). `make
// generate` runs it; with -check it changes nothing and fails when the README is not up to
// date (a test runs it so).
//
// In a comment, lines indented by two or more spaces after the "#" (or starting with "- ") are
// an example, shown as a code block.
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// chartPath is the chart's directory, relative to the module root.
const chartPath = "charts/provider-health-exporter"

//go:embed readme.md.tmpl
var readmeTemplate string

// maxInput caps each file read: the chart's own files, far below it.
const maxInput = 1 << 20

func main() {
	root := flag.String("root", ".", "the module's root directory")
	check := flag.Bool("check", false, "change nothing; fail when the README is not up to date")
	flag.Parse()
	stale, err := run(*root, !*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartdoc:", err)
		os.Exit(1)
	}
	if *check && stale {
		fmt.Fprintf(os.Stderr, "chartdoc: %s/README.md is not what values.yaml's comments say; run `make generate`\n", chartPath)
		os.Exit(1)
	}
}

// run renders the README and reports whether the committed one differs, writing it when write
// is set.
func run(root string, write bool) (stale bool, err error) {
	dir := filepath.Join(root, chartPath)
	chart, err := readFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return false, err
	}
	values, err := readFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return false, err
	}
	types, err := readFile(filepath.Join(dir, "files", "types.yaml"))
	if err != nil {
		return false, err
	}
	out, err := render(chart, values, types)
	if err != nil {
		return false, err
	}
	path := filepath.Join(dir, "README.md")
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if bytes.Equal(old, out) {
		return false, nil
	}
	if write {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return true, err
		}
	}
	return true, nil
}

// readFile reads one of the chart's files, refusing anything but a regular file of at most
// maxInput bytes.
func readFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxInput {
		return nil, fmt.Errorf("%s: want a regular file of at most %d bytes", path, maxInput)
	}
	return os.ReadFile(path)
}

// Chart is what the README says of Chart.yaml.
type Chart struct {
	Name        string `yaml:"name"`
	Version     string `yaml:"version"`
	AppVersion  string `yaml:"appVersion"`
	Description string `yaml:"description"`
	Home        string `yaml:"home"`
}

// Section is a top-level key of values.yaml: its comment and its values.
type Section struct {
	Key    string
	Doc    Doc
	Values []Value
}

// Value is one documented value: its dotted path, its default (as JSON) and its comment.
type Value struct {
	Path    string
	Default string
	Doc     Doc
}

// Doc is a comment: paragraphs of text and examples, in order.
type Doc []Block

// Block is a paragraph (Code false) or an example (Code true).
type Block struct {
	Code bool
	Text string
}

// Types is the chart's files/types.yaml (written by scripts/gentypes): each provider type's
// credentials Secret.
type Types struct {
	Credentials []struct {
		Type        string `yaml:"type"`
		None        bool   `yaml:"none"`
		Secret      string `yaml:"secret"`
		MountPath   string `yaml:"mountPath"`
		Description string `yaml:"description"`
		Keys        []struct {
			File  string `yaml:"file"`
			Value string `yaml:"value"`
			Field string `yaml:"field"`
		} `yaml:"keys"`
		Files *struct {
			Value   string `yaml:"value"`
			Field   string `yaml:"field"`
			Example string `yaml:"example"`
		} `yaml:"files"`
	} `yaml:"credentials"`
}

func render(chartYAML, valuesYAML, typesYAML []byte) ([]byte, error) {
	var chart Chart
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil {
		return nil, fmt.Errorf("chart metadata (Chart.yaml): %w", err)
	}
	var types Types
	if err := yaml.Unmarshal(typesYAML, &types); err != nil {
		return nil, fmt.Errorf("files/types.yaml: %w", err)
	}
	if len(types.Credentials) == 0 {
		return nil, fmt.Errorf("files/types.yaml lists no provider type's credentials: run `make generate`")
	}
	sections, err := parseValues(valuesYAML)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("readme").Funcs(template.FuncMap{
		"doc": func(d Doc, indent string) string { return d.markdown(indent) },
	}).Parse(readmeTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = tmpl.Execute(&b, map[string]any{"Chart": chart, "Sections": sections, "Types": types.Credentials})
	return b.Bytes(), err
}

// parseValues reads values.yaml's top-level keys in order, each with its comment and values.
func parseValues(src []byte) ([]Section, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: want a mapping at the top")
	}
	top := doc.Content[0]
	var sections []Section
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.HeadComment == "" {
			return nil, fmt.Errorf("values.yaml:%d: %s has no comment above it: every top-level value is documented", k.Line, k.Value)
		}
		s := Section{Key: k.Value, Doc: parseComment(k.HeadComment)}
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			vals, err := leaves(k.Value, v)
			if err != nil {
				return nil, err
			}
			s.Values = vals
		} else {
			d, err := defaultOf(v)
			if err != nil {
				return nil, err
			}
			s.Values = []Value{{Path: k.Value, Default: d}}
		}
		sections = append(sections, s)
	}
	return sections, nil
}

// leaves lists the values under a mapping: a non-empty mapping whose keys carry comments is
// descended into; anything else is one value.
func leaves(prefix string, m *yaml.Node) ([]Value, error) {
	var out []Value
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		path := prefix + "." + k.Value
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 && commented(v) {
			if k.HeadComment != "" {
				out = append(out, Value{Path: path, Doc: parseComment(k.HeadComment)})
			}
			sub, err := leaves(path, v)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		d, err := defaultOf(v)
		if err != nil {
			return nil, err
		}
		out = append(out, Value{Path: path, Default: d, Doc: parseComment(k.HeadComment)})
	}
	return out, nil
}

// commented reports whether any key of the mapping m has a comment above it.
func commented(m *yaml.Node) bool {
	for i := 0; i < len(m.Content); i += 2 {
		if m.Content[i].HeadComment != "" {
			return true
		}
	}
	return false
}

// defaultOf renders a value as compact JSON.
func defaultOf(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", fmt.Errorf("values.yaml:%d: %w", v.Line, err)
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", fmt.Errorf("values.yaml:%d: %w", v.Line, err)
	}
	return string(b), nil
}

// parseComment turns a YAML head comment into paragraphs and examples.
func parseComment(c string) Doc {
	var d Doc
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
		code := strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "- ")
		switch {
		case strings.TrimSpace(line) == "":
			d = append(d, Block{}) // a paragraph break
			continue
		case len(d) > 0 && d[len(d)-1].Code == code && (code || d[len(d)-1].Text != ""):
			sep := " "
			if code {
				sep = "\n"
			}
			d[len(d)-1].Text += sep + line
			continue
		}
		d = append(d, Block{Code: code, Text: line})
	}
	var out Doc
	for _, b := range d {
		if b.Text != "" {
			out = append(out, b)
		}
	}
	return out
}

// markdown renders a comment, each line after the first indented by indent (inside a list item).
func (d Doc) markdown(indent string) string {
	var parts []string
	for _, b := range d {
		if b.Code {
			lines := strings.Split(dedent(b.Text), "\n")
			parts = append(parts, "```yaml\n"+indent+strings.Join(lines, "\n"+indent)+"\n"+indent+"```")
			continue
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"+indent)
}

// dedent removes the indentation every line of an example shares.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	return strings.Join(lines, "\n")
}
