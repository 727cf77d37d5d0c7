package config

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// targetFileSeeds are files of every form the splitters meet: YAML lists at column 0 with
// comments, anchors across groups, flow lists, indented lists, JSON arrays on one line and on
// many, breaks of every kind.
var targetFileSeeds = []string{
	"- targets: [a, b]\n  labels: {rack: r1}\n- targets:\n  - c\n",
	"# inventory\n\n- targets: [a]\n  # the rack\n  labels:\n    rack: r1\n-\n- targets: ['b:22', \"c\"]\n",
	"- &x {targets: [a]}\n- *x\n",
	"- targets: [a]\n  labels: &l {rack: r1}\n- targets: [b]\n  labels: *l\n",
	"- targets: [a,\n- b]\n",
	"- targets: |\n  a\n- targets: [b]\n",
	"[{targets: [a]}, {targets: [b]}]\n",
	"  - targets: [a]\n  - targets: [b]\n",
	"- targets: [a]\n---\n- targets: [b]\n",
	"- targets: [a]\r\n- targets: [b]\r\n",
	"- targets: [a]\r- targets: [b]\r",
	"- targets: [\"a\u2028b\"]\n- targets: [c]\n",
	"-\ttargets: [a]\n- ? targets\n  : [b]\n",
	"- {targets: [a], labels: {x: \"é\"}}\n- targets: [a]\n",
	`[{"targets": ["a"], "labels": {"site": "fra1"}}, {"targets": ["b"]}]`,
	"[\n  {\"targets\": [\"a\"]},\n  {\"targets\": [\"a\", \"b\", 1]},\n  [\"c\"],\n  {\"targets\": [\"d\"], \"labels\": {\"é\": \"x\"}}\n]\n",
	"[1, {\"targets\": []}]",
	`[{"labels": {"é": "x"}, "targets": [1]}, {"targets": [true]}]`,
	"{\"targets\": [\"a\"]}",
}

// FuzzNodeBound: nodeBound bounds the nodes the decoder builds from any input (both documents
// document reads), so that a file refused by it is one that could have built more.
func FuzzNodeBound(f *testing.F) {
	for _, s := range targetFileSeeds {
		f.Add(s)
	}
	for _, s := range []string{": \n", "? \n", "- - - \n", "[: b]", "{a, b}", "[*a: b]", "&a\n", "---\n---\n", "!!str : x", "[a:]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		n := 0
		func() {
			defer func() { _ = recover() }()
			dec := yaml.NewDecoder(strings.NewReader(data))
			for range 2 {
				var doc yaml.Node
				if dec.Decode(&doc) != nil {
					return
				}
				n += countNodes(&doc)
			}
		}()
		if b := nodeBound([]byte(data)); n > b {
			t.Fatalf("%q decodes into %d nodes, bound %d", data, n, b)
		}
	})
}

// FuzzTargetItems: a file read group by group reads as it does decoded whole: the same groups,
// or the same problems at the same places; and no input panics under a small ceiling.
func FuzzTargetItems(f *testing.F) {
	for _, s := range targetFileSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, data string, json bool) {
		name := "hosts.yml"
		if json {
			name = "hosts.json"
		}
		parts, err := ParseTargetFile(name, []byte(data), nil)
		d := &decoder{file: name}
		var whole []TargetGroup
		if !json || d.validJSON([]byte(data)) {
			if !empty([]byte(data)) {
				whole = (&groupReader{d: d, seen: map[string]int{}}).whole([]byte(data))
			}
		}
		wholeErr := d.result()
		if wholeErr != nil {
			whole = nil
		}
		// Under a small ceiling the bounds refuse much; whatever they refuse is placed problems.
		if _, err := parseTargetFile(name, []byte(data), nil, 3); err != nil {
			if _, ok := err.(Errors); !ok {
				t.Fatalf("%q under a ceiling of 3: error of type %T", data, err)
			}
		}
		if !reflect.DeepEqual(parts, whole) || (err == nil) != (wholeErr == nil) || err != nil && err.Error() != wholeErr.Error() {
			t.Fatalf("%q (items %v):\nin parts: %v\n%v\nwhole:    %v\n%v", data, targetItems([]byte(data), json), parts, err, whole, wholeErr)
		}
	})
}
