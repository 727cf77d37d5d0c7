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
