package testutil

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// MetricRow is one metric's row in docs/metrics.md's tables.
type MetricRow struct {
	Name, Type string
	// Labels are the label names the row lists, in its order. A row that describes some of its
	// labels rather than naming them (target_info's "and the target's labels") keeps the
	// description among them.
	Labels []string
	// Section is the heading ("## ...") the row is under.
	Section string
}

// metricRow is a table row of docs/metrics.md: `name` | type | labels |.
var metricRow = regexp.MustCompile("^\\| `([a-z_:][a-z0-9_:]*)` \\| ([a-z]+) \\|([^|]*)\\|")

// MetricsDoc reads the metric rows of the repository's docs/metrics.md, in the file's order: a
// metric documented twice is there twice. It fails the test when the file has none.
func MetricsDoc(tb testing.TB) []MetricRow {
	tb.Helper()
	// A regular file of the repository, bounded like every file read (1 MiB: about 30 times
	// its size today).
	b, err := fileread.Read(filepath.Join(RepoRoot(tb), "docs", "metrics.md"), 1<<20)
	if err != nil {
		tb.Fatal(err)
	}
	var rows []MetricRow
	section := ""
	for line := range strings.Lines(string(b)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		m := metricRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := MetricRow{Name: m[1], Type: m[2], Section: section}
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				r.Labels = append(r.Labels, l)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		tb.Fatal("no metric rows found in docs/metrics.md")
	}
	return rows
}
