package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestChangelogReleaseSection: CHANGELOG.md keeps "## Unreleased" on top for the changes since
// the last release, and the first release section below it is VERSION's, in the heading form
// of the Prometheus projects that `promu check changelog` reads ("## 0.1.0 / 2026-12-03"), so
// that the tarballs and the image tagged VERSION ship the notes of that version.
func TestChangelogReleaseSection(t *testing.T) {
	raw, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	version, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "## ") {
			headings = append(headings, l)
		}
	}
	if len(headings) < 2 || headings[0] != "## Unreleased" {
		t.Fatalf("CHANGELOG.md's sections are %q, want \"## Unreleased\" first, then the releases", headings)
	}
	release := regexp.MustCompile(`^## (\d+\.\d+\.\d+(?:-\S+)?) / (\d{4}-\d{2}-\d{2})$`)
	for i, h := range headings[1:] {
		m := release.FindStringSubmatch(h)
		if m == nil {
			t.Errorf("CHANGELOG.md section %q: want \"## <version> / <YYYY-MM-DD>\"", h)
			continue
		}
		if _, err := time.Parse(time.DateOnly, m[2]); err != nil {
			t.Errorf("CHANGELOG.md section %q: %v", h, err)
		}
		if want := strings.TrimSpace(string(version)); i == 0 && m[1] != want {
			t.Errorf("the latest release in CHANGELOG.md is %s, VERSION says %s: add its section when bumping VERSION", m[1], want)
		}
	}
}

// TestChangelogChartVersion: the chart's version (Chart.yaml) follows the changes: the section
// it ships in (Unreleased until the release, then the release's) says "Helm chart <version>", so
// that a change of the chart that raises its version has its entry, and an entry names the
// version a user upgrades to.
func TestChangelogChartVersion(t *testing.T) {
	raw, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile("charts/provider-health-exporter/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version: (\S+)$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no version")
	}
	version := string(m[1])
	// The sections up to and including the first release.
	sections := regexp.MustCompile(`(?m)^## `).Split(string(raw), -1)
	if len(sections) < 3 {
		t.Fatalf("CHANGELOG.md has %d sections, want Unreleased and a release", len(sections)-1)
	}
	for _, s := range sections[1:3] {
		if strings.Contains(s, "Helm chart "+version) {
			return
		}
	}
	t.Errorf("neither CHANGELOG.md's Unreleased section nor its latest release names \"Helm chart %s\", Chart.yaml's version: "+
		"raise the chart's version with its changes and say so in their entry", version)
}
