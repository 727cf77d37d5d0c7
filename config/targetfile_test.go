package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// noColon is a target check for the tests: a target must not hold a colon.
func noColon(t string) string {
	if strings.Contains(t, ":") {
		return "invalid address " + config.Quote(t) + ": no colon here"
	}
	return ""
}

func TestParseTargetFile(t *testing.T) {
	for _, tc := range []struct {
		name, file, data string
		want             []config.TargetGroup
	}{
		{name: "yaml", file: "hosts.yml", data: "- targets: [a, b]\n  labels: {rack: r1}\n- targets:\n  - c\n",
			want: []config.TargetGroup{{Targets: []string{"a", "b"}, Lines: []int{1, 1}, Labels: map[string]string{"rack": "r1"}},
				{Targets: []string{"c"}, Lines: []int{4}}}},
		{name: "json", file: "hosts.JSON", data: "[\n {\"targets\": [\"a\"],\n  \"labels\": {\"site\": \"fra1\", \"maintenance\": \"true\"}}\n]\n",
			want: []config.TargetGroup{{Targets: []string{"a"}, Lines: []int{2}, Labels: map[string]string{"site": "fra1", "maintenance": "true"}}}},
		{name: "empty file", file: "hosts.yaml", data: "# nothing yet\n", want: nil},
		{name: "empty json", file: "hosts.json", data: "  \n", want: nil},
		{name: "null", file: "hosts.yaml", data: "~\n", want: nil},
		{name: "empty list", file: "hosts.json", data: "[]", want: nil},
		{name: "group without targets listed", file: "hosts.yml", data: "- targets: []\n", want: []config.TargetGroup{{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := config.ParseTargetFile(tc.file, []byte(tc.data), noColon)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

// TestParseTargetFileErrors: every problem of a file is reported at once, at its file, line
// and column, with the field and what is allowed.
func TestParseTargetFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, data, want string
	}{
		{"extension", "hosts.txt", "- targets: [a]\n",
			"hosts.txt: a target file must end in .json, .yml, .yaml (Prometheus's file_sd format)"},
		{"json syntax", "hosts.json", "[\n  {\"targets\": [\"a\",]}\n]\n",
			"hosts.json:2:20: invalid JSON: invalid character ']' looking for beginning of value"},
		{"yaml syntax", "hosts.yml", "- targets: [a\n- labels: {}\n",
			"hosts.yml:1: invalid YAML: did not find expected ',' or ']'"},
		{"not a list", "hosts.yml", "targets: [a]\n",
			"hosts.yml:1:1: a target file is a list of groups ({targets: [...], labels: {...}}), got a mapping"},
		{"unknown key", "hosts.yml", "- targets: [a]\n  label: {rack: r1}\n",
			`hosts.yml:2:3: [0].label: unknown field (allowed: targets, labels)`},
		{"missing targets", "hosts.yml", "- labels: {rack: r1}\n",
			"hosts.yml:1:3: [0].targets: missing required field (a list of targets)"},
		{"targets not a list", "hosts.yml", "- targets: a\n",
			`hosts.yml:1:12: [0].targets: must be a list, got string "a"`},
		{"target not a string", "hosts.yml", "- targets: [a, {b: c}, true]\n",
			"hosts.yml:1:16: [0].targets[1]: a target must be a string, got a mapping\n" +
				"hosts.yml:1:24: [0].targets[2]: a target must be a string, got boolean true"},
		{"bad target", "hosts.yml", "- targets: ['a:22']\n",
			`hosts.yml:1:13: [0].targets[0]: invalid address "a:22": no colon here`},
		{"empty target", "hosts.yml", "- targets: ['']\n",
			"hosts.yml:1:13: [0].targets[0]: a target must not be empty"},
		{"duplicate target", "hosts.yml", "- targets: [a]\n- targets: [b, a]\n",
			`hosts.yml:2:16: [1].targets[1]: duplicate target "a" (first listed at line 1)`},
		{"reserved label", "hosts.yml", "- targets: [a]\n  labels: {instance: x, __meta_rack: y, rack-1: z}\n",
			`hosts.yml:2:12: [0].labels.instance: label name "instance" is reserved (the exporter's or Prometheus's own label; not allowed: provider, target, job, instance, or a name starting with __)` + "\n" +
				`hosts.yml:2:25: [0].labels.__meta_rack: invalid label name "__meta_rack": names starting with __ are reserved for Prometheus` + "\n" +
				`hosts.yml:2:41: [0].labels.rack-1: invalid label name "rack-1": must match [a-zA-Z_][a-zA-Z0-9_]* (Prometheus's label names)`},
		{"bad maintenance", "hosts.yml", "- targets: [a]\n  labels: {maintenance: soon}\n",
			`hosts.yml:2:25: [0].labels.maintenance: invalid maintenance "soon": want true, false or an RFC 3339 end time such as 2026-12-24T06:00:00Z`},
		{"two documents", "hosts.yml", "- targets: [a]\n---\n- targets: [b]\n",
			"hosts.yml:2:1: a second YAML document starts here; the file is a single document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := config.ParseTargetFile(tc.file, []byte(tc.data), noColon)
			if err == nil {
				t.Fatalf("no error; groups %v", got)
			}
			if got != nil {
				t.Errorf("groups %v beside the error", got)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", err, tc.want)
			}
		})
	}
}

func TestReadTargetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts.yml")
	if _, err := config.ReadTargetFile(path, 1<<20, 0, nil); !os.IsNotExist(err) {
		t.Errorf("missing file: %v, want a not-exist error", err)
	}
	if err := os.WriteFile(path, []byte("- targets: ['a:22']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := config.ReadTargetFile(path, 1<<20, 0, nil)
	if err != nil || len(got) != 1 || got[0].Targets[0] != "a:22" {
		t.Errorf("got %v, %v", got, err)
	}
}

func TestTargetFilePatternProblem(t *testing.T) {
	for pattern, want := range map[string]string{
		"/etc/inventory/*.json":    "",
		"/etc/inventory/kvm-?.YML": "",
		"/etc/inventory/a.yaml":    "",
		"/etc/inventory/*":         `invalid pattern "/etc/inventory/*": must end in .json, .yml, .yaml (Prometheus's file_sd format, JSON or YAML by the ending)`,
		"/etc/inventory/[a.json":   `invalid pattern "/etc/inventory/[a.json": syntax error in pattern (patterns follow Go's filepath.Match: *, ?, [a-z])`,
	} {
		if got := config.TargetFilePatternProblem(pattern); got != want {
			t.Errorf("%s: %q, want %q", pattern, got, want)
		}
	}
}

// FuzzParseTargetFile: no input panics, and what parses lists only valid targets and labels.
func FuzzParseTargetFile(f *testing.F) {
	for _, s := range []string{
		"- targets: [a, b]\n  labels: {rack: r1}\n",
		`[{"targets": ["a"], "labels": {"maintenance": "2026-12-24T06:00:00Z"}}]`,
		"- &x {targets: [a]}\n- *x\n",
		"[",
		"- targets: [a, a]\n",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, data string, json bool) {
		name := "hosts.yml"
		if json {
			name = "hosts.json"
		}
		groups, err := config.ParseTargetFile(name, []byte(data), noColon)
		if err != nil {
			if groups != nil {
				t.Fatalf("groups beside an error: %v", groups)
			}
			es, ok := err.(config.Errors)
			if !ok {
				t.Fatalf("error of type %T, want config.Errors: %v", err, err)
			}
			if len(es) > config.MaxProblems+1 {
				t.Fatalf("%d problems reported, want at most %d and the count of the rest", len(es), config.MaxProblems)
			}
			for _, e := range es {
				if len(e.Msg) > config.MaxMessageLen {
					t.Fatalf("a message of %d bytes, want at most %d", len(e.Msg), config.MaxMessageLen)
				}
			}
			return
		}
		seen := map[string]bool{}
		for _, g := range groups {
			if len(g.Lines) != len(g.Targets) {
				t.Fatalf("%d lines for %d targets", len(g.Lines), len(g.Targets))
			}
			for _, tg := range g.Targets {
				if tg == "" || noColon(tg) != "" || seen[tg] {
					t.Fatalf("target %q accepted", tg)
				}
				seen[tg] = true
			}
			for k, v := range g.Labels {
				if config.LabelNameProblem(k) != "" || v == "" {
					t.Fatalf("label %q=%q accepted", k, v)
				}
			}
		}
	})
}
