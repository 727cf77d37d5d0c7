package config

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// readBlock decodes yaml, a mapping with the keys allowed, as a type's block at the path
// "block" of the providers file f.yml in /etc/phe, and runs read on its Fields. It returns
// what read returned and the problems it recorded, one "line:col: field: msg" each.
func readBlock[T any](t *testing.T, yaml string, allowed []string, read func(*Fields) T) (T, []string) {
	t.Helper()
	d := &decoder{file: "f.yml", baseDir: "/etc/phe", budget: aliasBudget}
	root := d.document([]byte(yaml))
	if root == nil {
		t.Fatalf("%q does not parse: %v", yaml, d.errs)
	}
	m, ok := d.mapping(root, nil, "block", allowed, false)
	if !ok || len(d.errs) > 0 {
		t.Fatalf("%q is not a mapping of %q: %v", yaml, allowed, d.errs)
	}
	got := read(&Fields{d: d, m: m})
	var problems []string
	for _, e := range d.errs {
		problems = append(problems, strings.TrimPrefix(e.Error(), "f.yml:"))
	}
	return got, problems
}

// readerCase is one value of a field x and what a reader makes of it.
type readerCase[T comparable] struct {
	yaml     string
	want     T
	problems []string
}

func runReader[T comparable](t *testing.T, name string, cases []readerCase[T], read func(*Fields) T) {
	t.Helper()
	for _, tc := range cases {
		got, problems := readBlock(t, tc.yaml, []string{"x", "y"}, read)
		if got != tc.want || !slices.Equal(problems, tc.problems) {
			t.Errorf("%s of %q = %v, problems %q; want %v, %q", name, tc.yaml, got, problems, tc.want, tc.problems)
		}
	}
}

// notBad refuses values that say bad, as a type's own Check would.
func notBad(s string) string {
	if strings.Contains(s, "bad") {
		return "invalid x " + Quote(s) + ": must not say bad"
	}
	return ""
}

func TestString(t *testing.T) {
	runReader(t, "String", []readerCase[string]{
		{yaml: "y: 1", want: ""},
		{yaml: "x:", want: ""},
		{yaml: "x: abc", want: "abc"},
		{yaml: "x: 1e3", want: "1e3"},
		{yaml: `x: ""`, want: ""},
		{yaml: "x: true", problems: []string{"1:4: block.x: must be a string, got boolean true (quote it to mean the text)"}},
		{yaml: "x: [a]", problems: []string{"1:4: block.x: must be a string, got a list"}},
		// A value the check refuses is still returned.
		{yaml: "x: a-bad-one", want: "a-bad-one", problems: []string{`1:4: block.x: invalid x "a-bad-one": must not say bad`}},
	}, func(f *Fields) string { return f.String("x", notBad) })
	// The node variant: nil when absent, the value's node (null included) when present.
	for yaml, line := range map[string]int{"y: 1": 0, "y: 1\nx:": 2, "y: 1\nx: abc": 2} {
		_, problems := readBlock(t, yaml, []string{"x", "y"}, func(f *Fields) any {
			s, v := f.StringNode("x")
			if (v == nil) != (line == 0) || v != nil && v.Line != line {
				t.Errorf("StringNode of %q = %q at %v, want line %d", yaml, s, v, line)
			}
			return nil
		})
		if problems != nil {
			t.Errorf("StringNode of %q: %q", yaml, problems)
		}
	}
}

func TestRequired(t *testing.T) {
	const hint = " (a short word)"
	runReader(t, "Required", []readerCase[string]{
		{yaml: "x: abc", want: "abc"},
		{yaml: "y: 1", problems: []string{"1:1: block.x: missing required field (a short word)"}},
		{yaml: "x:", problems: []string{"1:3: block.x: must not be empty (a short word)"}},
		{yaml: `x: ""`, problems: []string{"1:4: block.x: must not be empty (a short word)"}},
		{yaml: "x: {a: b}", problems: []string{"1:4: block.x: must be a string, got a mapping"}},
		{yaml: "x: a-bad-one", want: "a-bad-one", problems: []string{`1:4: block.x: invalid x "a-bad-one": must not say bad`}},
	}, func(f *Fields) string { return f.Required("x", hint, notBad) })
}

func TestInt(t *testing.T) {
	runReader(t, "Int", []readerCase[int]{
		{yaml: "y: 1", want: 22},
		{yaml: "x:", want: 22},
		{yaml: "x: 2222", want: 2222},
		{yaml: "x: 0x16", want: 22},
		// A value out of range is a problem, and the default stands in for it.
		{yaml: "x: 0", want: 22, problems: []string{"1:4: block.x: x 0 is out of range (allowed: 1-65535)"}},
		{yaml: "x: 65536", want: 22, problems: []string{"1:4: block.x: x 65536 is out of range (allowed: 1-65535)"}},
		{yaml: `x: "22"`, want: 22, problems: []string{`1:4: block.x: must be an integer, got string "22"`}},
		{yaml: "x: 4294967296", want: 22, problems: []string{"1:4: block.x: integer 4294967296 is out of range"}},
	}, func(f *Fields) int { return f.Int("x", 22, 1, 65535) })
	runReader(t, "Int without an upper bound", []readerCase[int]{
		{yaml: "x: 2147483647", want: math.MaxInt32},
		{yaml: "x: -2", want: 1, problems: []string{"1:4: block.x: x -2 is out of range (allowed: 1 or more)"}},
	}, func(f *Fields) int { return f.Int("x", 1, 1, math.MaxInt32) })
}

func TestBool(t *testing.T) {
	runReader(t, "Bool", []readerCase[bool]{
		{yaml: "y: 1", want: false},
		{yaml: "x:", want: false},
		{yaml: "x: true", want: true},
		{yaml: `x: "true"`, problems: []string{`1:4: block.x: must be true or false, got string "true"`}},
	}, func(f *Fields) bool { return f.Bool("x") })
}

// list joins a list reader's result, for a comparable result.
func list(items []string) string { return strings.Join(items, ",") }

func TestStrings(t *testing.T) {
	runReader(t, "Strings", []readerCase[string]{
		{yaml: "y: 1", want: ""},
		{yaml: "x:", want: ""},
		{yaml: "x: []", want: ""},
		{yaml: "x: [a, 22, abc]", want: "a,22,abc"},
		{yaml: "x: a", problems: []string{`1:4: block.x: must be a list, got string "a"`}},
		{yaml: `x: [a, "", true, [b], null, bad, c]`, want: "a,c", problems: []string{
			"1:8: block.x[1]: must not be empty",
			"1:12: block.x[2]: must be a string, got boolean true",
			"1:18: block.x[3]: must be a string, got a list",
			"1:23: block.x[4]: must be a string, got null",
			`1:29: block.x[5]: invalid x "bad": must not say bad`,
		}},
	}, func(f *Fields) string { return list(f.Strings("x", notBad)) })
}

func TestPaths(t *testing.T) {
	runReader(t, "Paths", []readerCase[string]{
		{yaml: "x: [/abs, rel/a.yml, ../up]", want: "/abs,/etc/phe/rel/a.yml,/etc/up"},
		{yaml: `x: ["a\0b", ""]`, problems: []string{
			"1:5: block.x[0]: a path must not contain a NUL byte",
			"1:13: block.x[1]: must not be empty",
		}},
		{yaml: "x: [/a/bad]", problems: []string{`1:5: block.x[0]: invalid x "/a/bad": must not say bad`}},
	}, func(f *Fields) string { return list(f.Paths("x", notBad)) })
}

func TestAddresses(t *testing.T) {
	runReader(t, "Addresses with a default port", []readerCase[string]{
		{yaml: "x: [h1, 'h2:2222', '[fd00::1]', 198.18.0.1]", want: "h1:22,h2:2222,[fd00::1]:22,198.18.0.1:22"},
		// The same host and port, written another way, is a duplicate.
		{yaml: "x: [h1, 'H1:22', 'h1:23']", want: "h1:22,h1:23", problems: []string{
			`1:9: block.x[1]: duplicate address "H1:22" (first listed at line 1)`,
		}},
		{yaml: "x: ['fd00::1', 'h:0', 3]", problems: []string{
			`1:5: block.x[0]: invalid address "fd00::1": an IPv6 address goes in brackets, [v6] or [v6]:port (allowed: host, host:port or [v6]:port)`,
			`1:16: block.x[1]: invalid address "h:0": port "0" is not a number from 1 to 65535 (allowed: host, host:port or [v6]:port)`,
			`1:23: block.x[2]: invalid address "3": not a valid IPv4 address (allowed: host, host:port or [v6]:port)`,
		}},
	}, func(f *Fields) string { return list(f.Addresses("x", 22)) })

	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 62) + "." + strings.Repeat("c", 62) + "." + strings.Repeat("d", 62)
	runReader(t, "Addresses with a required port", []readerCase[string]{
		{yaml: "x: ['h1:80', '[::1]:80']", want: "h1:80,[::1]:80"},
		{yaml: "x: [h1]", problems: []string{`1:5: block.x[0]: invalid address "h1": no port (allowed: host:port or [v6]:port)`}},
		// The checks see the address as written: here, the name of the target it is.
		{yaml: "x: ['" + long + ":80']", problems: []string{
			"1:5: block.x[0]: target name of 254 bytes: the ProviderHealth object's status.targets[].name holds at most 253 bytes (set a shorter name)",
		}},
	}, func(f *Fields) string { return list(f.Addresses("x", 0, TargetNameProblem)) })
}

func TestLabelsReader(t *testing.T) {
	got, problems := readBlock(t, "labels: {rack: r1, __x: y}", []string{"labels"}, func(f *Fields) map[string]string {
		return f.Labels()
	})
	if len(got) != 1 || got["rack"] != "r1" || len(problems) != 1 || !strings.Contains(problems[0], "block.labels.__x: invalid label name") {
		t.Errorf("Labels = %v, problems %q; want rack only and the reserved name refused", got, problems)
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		// dial is host:port with the default port 22, "" when invalid; required is the same
		// without a default port.
		dial, required string
	}{
		{"198.18.0.1", "198.18.0.1:22", ""},
		{"198.18.0.1:2222", "198.18.0.1:2222", "198.18.0.1:2222"},
		{"hv1", "hv1:22", ""},
		{"hv1.lab.example.com:22", "hv1.lab.example.com:22", "hv1.lab.example.com:22"},
		{"HV1.Lab", "HV1.Lab:22", ""},
		{"[fd00::1]:2222", "[fd00::1]:2222", "[fd00::1]:2222"},
		{"[fd00::1]", "[fd00::1]:22", ""},
		{"fd00::1", "", ""},
		{"fd00::1:22", "", ""},
		{"[fe80::1%eth0]:22", "[fe80::1%eth0]:22", "[fe80::1%eth0]:22"},
		{"", "", ""},
		{":22", "", ""},
		{"hv1:", "", ""},
		{"hv1:0", "", ""},
		{"hv1:+22", "", ""},
		{"hv1:65536", "", ""},
		{"hv1:22:33", "", ""},
		{"[fd00::1", "", ""},
		{"[fd00::1]x", "", ""},
		{"[198.18.0.1]:22", "", ""},
		{"fd00::1::2", "", ""},
		{"-hv1", "", ""},
		{"hv1-", "", ""},
		{"hv..lab", "", ""},
		{"hv_1", "", ""},
		{"198.18.0.256", "", ""},
		{strings.Repeat("a", 64), "", ""},
		{strings.Repeat("a.", 127) + "aa", "", ""},
	} {
		for _, c := range []struct {
			defaultPort int
			want        string
		}{{22, tc.dial}, {0, tc.required}} {
			_, _, problem := ParseAddress(tc.addr, c.defaultPort)
			if (problem == "") != (c.want != "") {
				t.Errorf("ParseAddress(%q, %d): problem %q, want valid=%v", tc.addr, c.defaultPort, problem, c.want != "")
				continue
			}
			if problem != "" && !strings.HasPrefix(problem, "invalid address "+Quote(tc.addr)+": ") {
				t.Errorf("ParseAddress(%q, %d): problem %q does not name the address", tc.addr, c.defaultPort, problem)
			}
			if c.want != "" {
				if got := DialAddress(tc.addr, c.defaultPort); got != c.want {
					t.Errorf("DialAddress(%q, %d) = %q, want %q", tc.addr, c.defaultPort, got, c.want)
				}
			}
		}
	}
}
