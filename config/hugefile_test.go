//go:build !race

// The race detector's shadow memory and instrumented allocation make the measures of this
// file meaningless, and its 16 MiB parses take minutes: it runs without it.

package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// hostFile writes a target file into dir (JSON when its name ends in .json) of n targets, or
// of as many as fill size bytes when n is 0: groups of perGroup targets (0: one group of them
// all) named by name, each group with that many labels (rack, site, row, then l3...). It returns the file's path
// and how many targets it holds.
func hostFile(t testing.TB, dir, file string, n, size, perGroup, labels int, name func(int) string) (string, int) {
	t.Helper()
	json := strings.HasSuffix(file, ".json")
	var b strings.Builder
	more := func(i int) bool {
		if n > 0 {
			return i < n
		}
		return b.Len() < size-1024
	}
	i := 0
	if json {
		b.WriteString("[")
	}
	for g := 0; more(i); g++ {
		switch {
		case json:
			if g > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n{")
			if labels > 0 {
				fmt.Fprintf(&b, `"labels": {%s}, `, groupLabels(g, labels, `"%s": "%s"`))
			}
			b.WriteString(`"targets": [`)
		case labels > 0:
			fmt.Fprintf(&b, "- labels: {%s}\n  targets:\n", groupLabels(g, labels, "%s: '%s'"))
		default:
			b.WriteString("- targets:\n")
		}
		for j := 0; (perGroup == 0 || j < perGroup) && more(i); j++ {
			switch {
			case json && j > 0:
				fmt.Fprintf(&b, ", %q", name(i))
			case json:
				fmt.Fprintf(&b, "%q", name(i))
			default:
				fmt.Fprintf(&b, "  - %s\n", name(i))
			}
			i++
		}
		if json {
			b.WriteString("]}")
		}
	}
	if json {
		b.WriteString("\n]\n")
	}
	if b.Len() > 16<<20 {
		t.Fatalf("%s: %d bytes, more than 16 MiB", file, b.Len())
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, i
}

// groupLabels are the labels of group g, each written by format.
func groupLabels(g, labels int, format string) string {
	ls := make([]string, labels)
	for k := range ls {
		switch k {
		case 0:
			ls[k] = fmt.Sprintf(format, "rack", fmt.Sprint("r", g%97))
		case 1:
			ls[k] = fmt.Sprintf(format, "site", "fra1")
		case 2:
			ls[k] = fmt.Sprintf(format, "row", fmt.Sprint(g%13))
		default:
			ls[k] = fmt.Sprintf(format, fmt.Sprint("l", k), fmt.Sprint("v", g%7))
		}
	}
	return strings.Join(ls, ", ")
}

// shortName is a name of the file: 1.6 M of them fill 16 MiB.
func shortName(i int) string { return fmt.Sprintf("h%d", i) }

// longName is a host name of 160 bytes: 100,000 of them nearly fill 16 MiB.
func longName(i int) string {
	return fmt.Sprintf("hv-%06d.rack-%04d.row-%02d.hall-a.building-3.fra1.region-europe-west.datacenters.infrastructure.compute.platform-team.example-corporation.net:22", i, i/40, i/4000)
}

// mediumName is a host name of 24 bytes.
func mediumName(i int) string { return fmt.Sprintf("hv-%06d.fra1.example.net", i) }

// peakHeap is the most heap in use while f runs (testutil.PeakHeap), after a collection.
func peakHeap(t *testing.T, f func()) uint64 {
	runtime.GC()
	return testutil.PeakHeap(t, f)
}

// allocated is what f allocates, in bytes (the process's TotalAlloc before and after; the test
// is not parallel, so no other test allocates meanwhile).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeTargetFileRefusedInBoundedMemory: the host file, 16 MiB of 1.4 to 1.5 M short
// names in one group, YAML or JSON, is refused before it is decoded, with an error naming the
// file, the group, its bound and the flag, and its read allocates less than 64 MiB (the file
// itself, read, is 16 MiB); decoded into a tree first, it allocated 414 MiB. Written one group a
// name, its groups past the ceiling are refused as they come, the heap never above 128 MiB
// (648 MiB decoded whole).
func TestHugeTargetFileRefusedInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads files of 16 MiB")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		file     string
		perGroup int
		want     string // the error's start after the path
	}{
		{"one-group.yml", 0, ":1:1: [0]: this group may decode into up to "},
		{"one-group.json", 0, ":2:1: [0]: this group may decode into up to "},
		{"group-each.yml", 1, ":200001:3: [100000]: more than 100000 groups in this file (--config.max-targets)"},
		{"group-each.json", 1, ":100002:1: [100000]: more than 100000 groups in this file (--config.max-targets)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path, n := hostFile(t, dir, tc.file, 0, 16<<20, tc.perGroup, 0, shortName)
			var err error
			var a uint64
			peak := peakHeap(t, func() {
				a = allocated(func() { _, err = config.ReadTargetFile(path, 16<<20, config.DefaultLimits.MaxTargets, nil) })
			})
			want := path + tc.want
			if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("%d targets: %v, want one problem starting %q", n, err, want)
			}
			if tc.perGroup == 0 && (!strings.Contains(err.Error(), "YAML nodes (counted from its bytes), more than the 404096 that --config.max-targets=100000 allows") || a > 64<<20) {
				t.Errorf("%d targets: %v, %d MiB allocated; want the bound named and under 64 MiB allocated", n, err, a>>20)
			}
			if peak > 128<<20 {
				t.Errorf("the read of %d targets held up to %d MiB of heap, want under 128 MiB", n, peak>>20)
			}
			t.Logf("%d targets, %d MiB allocated, peak heap %d MiB", n, a>>20, peak>>20)
		})
	}
}

// TestTargetFileWithinCeilingReads: files of 100,000 targets, one group of long names (about
// 16 MiB) or one labelled group a target, YAML or JSON, read whole, and the heap their read
// holds at its peak (the groups kept included) stays under 192 MiB. A group a target decoded
// into one tree held about 365 MiB.
func TestTargetFileWithinCeilingReads(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads files of 16 MiB")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		file     string
		perGroup int
		labels   int
		name     func(int) string
	}{
		{"long.yml", 0, 0, longName},
		{"long.json", 0, 0, longName},
		{"labelled.yml", 1, 3, mediumName},
		{"labelled.json", 1, 3, mediumName},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path, _ := hostFile(t, dir, tc.file, config.DefaultLimits.MaxTargets, 0, tc.perGroup, tc.labels, tc.name)
			var groups []config.TargetGroup
			var err error
			var a uint64
			peak := peakHeap(t, func() {
				a = allocated(func() { groups, err = config.ReadTargetFile(path, 16<<20, config.DefaultLimits.MaxTargets, nil) })
			})
			if err != nil {
				t.Fatal(firstLine(err))
			}
			n := 0
			for _, g := range groups {
				n += len(g.Targets)
				if tc.labels > 0 && len(g.Labels) != tc.labels {
					t.Fatalf("group %+v: labels not read", g)
				}
			}
			if last := groups[len(groups)-1]; n != config.DefaultLimits.MaxTargets || last.Targets[len(last.Targets)-1] != tc.name(n-1) {
				t.Errorf("%d targets read, the last %q; want %d, the last %q", n, last.Targets[len(last.Targets)-1], config.DefaultLimits.MaxTargets, tc.name(n-1))
			}
			if peak > 192<<20 {
				t.Errorf("the read held up to %d MiB of heap, want under 192 MiB", peak>>20)
			}
			t.Logf("%d groups, %d MiB allocated, peak heap %d MiB", len(groups), a>>20, peak>>20)
		})
	}
}
