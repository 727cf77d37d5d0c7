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
