package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEUpToDate: the chart's README is what values.yaml's comments and Chart.yaml say now
// (CI's drift check runs `make generate`; this fails first, naming the fix).
func TestREADMEUpToDate(t *testing.T) {
	stale, err := run("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	if stale {
		t.Errorf("%s/README.md is stale: run `make generate`", chartPath)
	}
}

// TestRender: every value is listed with its default and its comment; an example in a comment
// becomes a code block; install, upgrade and uninstall are there; a top-level value without a
// comment is refused, naming its line.
func TestRender(t *testing.T) {
	chart := []byte("name: c\nversion: 1.2.3\nappVersion: \"4.5.6\"\ndescription: A chart.\nhome: https://example.com/c\n")
	values := []byte(`# The image.
image:
  # The tag, e.g.
  #   tag: v1
  tag: ""
  pullPolicy: IfNotPresent
# Replicas.
replicas: 2
`)
	types := []byte("credentials:\n  - {type: a, secret: sa, mountPath: /etc/phe/sa, description: the key of a, keys: [{file: k.pem, value: key, field: keyFile}]}\n" +
		"  - {type: b, secret: sb, mountPath: /etc/phe/sb, description: configs of b, files: {value: files, field: config, example: x.conf}}\n" +
		"  - {type: c, none: true}\n")
	out, err := render(chart, values, types)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# c\n", "Chart version 1.2.3, exporter version 4.5.6", "## Install", "## Upgrade", "## Uninstall",
		"### `image`\n\nThe image.", "- `image.tag`: default `\"\"`.\n  The tag, e.g.\n\n  ```yaml\n  tag: v1\n  ```",
		"- `image.pullPolicy`: default `\"IfNotPresent\"`", "- `replicas`: default `2`",
		"## Provider types and their credentials",
		"| `a` | `sa` | `/etc/phe/sa/` | `k.pem` (`key`; `keyFile`): the key of a |\n",
		"| `b` | `sb` | `/etc/phe/sb/` | files of any name, in `files` (name to content), e.g. `x.conf` (`config`): configs of b |\n",
		"| `c` | - | - | none: its providers name no file |\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the README lacks %q:\n%s", want, out)
		}
	}
	if _, err := render(chart, values, []byte("credentials: []\n")); err == nil || !strings.Contains(err.Error(), "files/types.yaml lists no provider type's credentials") {
		t.Errorf("no types: err %v, want one naming files/types.yaml", err)
	}
	if _, err := render(chart, []byte("# Documented.\na: 1\nb: 2\n"), types); err == nil || !strings.Contains(err.Error(), "values.yaml:3: b has no comment") {
		t.Errorf("an undocumented value: err %v, want values.yaml:3 naming b", err)
	}
}

// TestCheckLeavesFiles: run without write reports a stale README and changes nothing.
func TestCheckLeavesFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, chartPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"Chart.yaml":       "name: c\nversion: 1.0.0\n",
		"values.yaml":      "# One.\na: 1\n",
		"README.md":        "old\n",
		"files/types.yaml": "credentials: [{type: a, secret: a, mountPath: /etc/phe/a, description: d, keys: [{file: f, value: v, field: ff}]}]\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := run(root, false)
	if err != nil || !stale {
		t.Fatalf("run: stale %v, err %v; want stale", stale, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "old\n" {
		t.Errorf("a check wrote the README: %q", b)
	}
	if stale, err := run(root, true); err != nil || !stale {
		t.Fatalf("write: stale %v, err %v", stale, err)
	}
	if stale, err := run(root, false); err != nil || stale {
		t.Errorf("after writing, stale %v, err %v", stale, err)
	}
}
