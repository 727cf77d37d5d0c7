package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// TestTargetFileCeiling: a target file of more targets than the ceiling is refused with an
// error naming the file, the line and the field of the first target beyond it, and the flag;
// one at the ceiling reads well.
func TestTargetFileCeiling(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) string {
		var b strings.Builder
		b.WriteString("- targets:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - h%d\n", i)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	at := write("at.yml", 5)
	groups, err := config.ReadTargetFile(at, 1<<20, 5, nil)
	if err != nil || len(groups) != 1 || len(groups[0].Targets) != 5 {
		t.Fatalf("5 targets with a ceiling of 5: %v %v", groups, err)
	}
	over := write("over.yml", 6)
	_, err = config.ReadTargetFile(over, 1<<20, 5, nil)
	want := over + ":7:5: [0].targets[5]: more than 5 targets in this file (--config.max-targets)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("6 targets with a ceiling of 5: %v, want %q", err, want)
	}
	if config.DefaultLimits.MaxTargets != 100_000 {
		t.Errorf("default ceiling %d, want 100,000", config.DefaultLimits.MaxTargets)
	}
}

// TestTargetFileNodeBound: a file that must be decoded whole (its list indented) is refused
// by its bound, naming the file, the bound and the flag; a file read a few groups at a time
// (64 KiB) whose last group does not decode, or whose alias names an anchor of an earlier
// batch, is decoded whole when its bound allows (and reads well), else refused with the
// decoder's error at its line; groups read a few at a time keep their order, labels and lines.
func TestTargetFileNodeBound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var flow, groups strings.Builder
	flow.WriteString("  - targets: [")
	for i := range 2100 {
		fmt.Fprintf(&flow, "a%d, ", i)
	}
	flow.WriteString("b]\n")
	for i := range 498 {
		fmt.Fprintf(&groups, "- targets: [hv-%03d.%s.example.net]\n", i, strings.Repeat("x", 120))
	}
	labelled := strings.ReplaceAll(groups.String(), "\n", "\n  labels: {a: b, c: d}\n")
	anchored := func(groups string) string {
		return "- targets: [x]\n  labels: &l {rack: r1}\n" + groups + "- targets: [y]\n  labels: *l\n"
	}
	for _, tc := range []struct {
		name, data string
		max        int
		want       []string // the error's start after the path, and what else it says
	}{
		{"indented.yml", flow.String(), 10, []string{": the file, decoded whole (its groups cannot be told apart from its bytes), may decode into up to ", "more than the 4136 that --config.max-targets=10 allows"}},
		{"syntax.yml", labelled + "- targets: [b\n", 500, []string{":997: invalid YAML: did not find expected ',' or ']'"}},
		{"anchor.yml", anchored(labelled), 500, []string{":1000: invalid YAML: unknown anchor 'l' referenced (a file this large is decoded a few groups at a time: an alias may name an anchor of its own group only)"}},
		{"anchor-whole.yml", anchored(groups.String()), 500, nil},
	} {
		path := write(tc.name, tc.data)
		got, err := config.ReadTargetFile(path, 1<<20, tc.max, nil)
		if tc.want == nil {
			if err != nil || len(got) != 500 || got[499].Labels["rack"] != "r1" {
				t.Errorf("%s: %d groups, %v; want 500, the last with the anchor's labels", tc.name, len(got), err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), path+tc.want[0]) || !strings.Contains(err.Error(), strings.Join(tc.want[1:], "")) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	var distinct strings.Builder
	for i := range 500 {
		fmt.Fprintf(&distinct, "- targets: []\n  labels: {n: '%d'}\n", i)
	}
	distinct.WriteString("- targets: [a, b]\n")
	read, err := config.ReadTargetFile(write("read.yml", distinct.String()), 1<<20, 600, nil)
	if err != nil || len(read) != 501 || read[499].Labels["n"] != "499" || read[500].Lines[1] != 1001 {
		t.Errorf("501 groups read a few at a time: %d groups, %v", len(read), err)
	}
}

// BenchmarkReadTargetFile16MiB reads a 16 MiB host file of 1.6 M short names (the
// --config.host-file-max-size default) with the default ceiling of 100,000 targets: it is
// refused, and B/op is what its parse allocates.
func BenchmarkReadTargetFile16MiB(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("- targets:\n")
	for i := 0; sb.Len() < 16<<20-16; i++ {
		fmt.Fprintf(&sb, "  - h%07d\n", i)
	}
	path := filepath.Join(b.TempDir(), "big.yml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := config.ReadTargetFile(path, 16<<20, config.DefaultLimits.MaxTargets, nil); err == nil {
			b.Fatal("a file of 1.6 M targets was taken")
		}
	}
}
