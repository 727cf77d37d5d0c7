package release

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// changelogRepo is the repository the CHANGELOG's version links point into.
const changelogRepo = "https://github.com/provider-health-exporter/provider-health-exporter"

// changelogKinds are Keep a Changelog's kinds of change, in its order.
var changelogKinds = []string{"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}

var (
	changelogRelease = regexp.MustCompile(`^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$`)
	changelogLinkRef = regexp.MustCompile(`^\[([^\]]+)\]: (\S+)$`)
)

// changelogVersion is one version's section of the CHANGELOG.
type changelogVersion struct {
	name   string // "Unreleased" or "1.2.3"
	line   int
	date   time.Time
	semver [3]int
	body   string // the section's text, its heading left out
}

// parseChangelog checks text's form, Keep a Changelog 1.1.0 (keepachangelog.com), and returns
// its versions, newest first, and its link references; each problem is one error naming its
// line: "# Changelog" first; "## [Unreleased]", then "## [X.Y.Z] - YYYY-MM-DD" headings, versions
// and dates descending; under a version only the kinds of change as "### " headings, each once
// and in Keep a Changelog's order, and every entry under one of them; at the bottom, a link
// reference for every version (Unreleased: compare/v<latest>...HEAD; a release: compare from the
// release before it, the first release: releases/tag), and none for anything else.
func parseChangelog(text string) (versions []changelogVersion, problems []string) {
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("CHANGELOG.md:%d: %s", line, fmt.Sprintf(format, args...)))
	}
	lines := strings.Split(text, "\n")
	if lines[0] != "# Changelog" {
		bad(1, "the first line is %q, want \"# Changelog\"", lines[0])
	}
	refs := map[string]string{}
	refLine := map[string]int{}
	var kinds []string // the kinds seen in the current version
	for i, l := range lines {
		n := i + 1
		if m := changelogLinkRef.FindStringSubmatch(l); m != nil {
			refs[m[1]], refLine[m[1]] = m[2], n
			continue
		}
		if len(refs) > 0 && strings.TrimSpace(l) != "" {
			bad(n, "text after the link references: they end the file")
		}
		switch {
		case strings.HasPrefix(l, "## "):
			v := changelogVersion{line: n}
			if l == "## [Unreleased]" {
				v.name = "Unreleased"
				if len(versions) > 0 {
					bad(n, "[Unreleased] comes after a release: it is the first version")
				}
			} else if m := changelogRelease.FindStringSubmatch(l); m == nil {
				bad(n, "the heading %q, want \"## [Unreleased]\" or \"## [X.Y.Z] - YYYY-MM-DD\"", l)
				continue
			} else {
				v.name = m[1] + "." + m[2] + "." + m[3]
				for j := range 3 {
					v.semver[j], _ = strconv.Atoi(m[j+1])
				}
				d, err := time.Parse(time.DateOnly, m[4])
				if err != nil {
					bad(n, "the date %q of %s: %v", m[4], v.name, err)
				}
				v.date = d
				if len(versions) == 0 {
					bad(n, "the first version is %s: want \"## [Unreleased]\" above it", v.name)
				} else if p := versions[len(versions)-1]; p.name != "Unreleased" {
					if slices.Compare(v.semver[:], p.semver[:]) >= 0 {
						bad(n, "version %s comes after %s: versions descend", v.name, p.name)
					}
					if v.date.After(p.date) {
						bad(n, "%s is dated %s, after %s's %s: dates descend", v.name, m[4], p.name, p.date.Format(time.DateOnly))
					}
				}
			}
			versions = append(versions, v)
			kinds = nil
		case strings.HasPrefix(l, "### "):
			kind := strings.TrimPrefix(l, "### ")
			k := slices.Index(changelogKinds, kind)
			switch {
			case len(versions) == 0:
				bad(n, "%q before the first version", l)
			case k < 0:
				bad(n, "the heading %q, want one of the kinds of change: ### %s", l, strings.Join(changelogKinds, ", ### "))
			case slices.Contains(kinds, kind):
				bad(n, "a second %q in %s", l, versions[len(versions)-1].name)
			case len(kinds) > 0 && slices.Index(changelogKinds, kinds[len(kinds)-1]) > k:
				bad(n, "%q after \"### %s\": the kinds go in the order %s", l, kinds[len(kinds)-1], strings.Join(changelogKinds, ", "))
			}
			kinds = append(kinds, kind)
		case strings.HasPrefix(l, "#"):
			if i > 0 {
				bad(n, "the heading %q: only \"## \" versions and \"### \" kinds of change", l)
			}
		case strings.HasPrefix(l, "- "):
			if len(kinds) == 0 {
				bad(n, "an entry outside a kind of change: put it under ### Added, Changed, Fixed, ...")
			}
		}
		if len(versions) > 0 && !strings.HasPrefix(l, "## ") {
			versions[len(versions)-1].body += l + "\n"
		}
	}
	if len(versions) == 0 || versions[0].name != "Unreleased" {
		bad(1, "no \"## [Unreleased]\" section")
	}
	for i, v := range versions {
		var want string
		switch {
		case v.name == "Unreleased" && i+1 < len(versions):
			want = changelogRepo + "/compare/v" + versions[i+1].name + "...HEAD"
		case v.name == "Unreleased":
			want = changelogRepo + "/commits/HEAD"
		case i+1 < len(versions):
			want = changelogRepo + "/compare/v" + versions[i+1].name + "...v" + v.name
		default:
			want = changelogRepo + "/releases/tag/v" + v.name
		}
		switch got, ok := refs[v.name]; {
		case !ok:
			bad(v.line, "no link reference for [%s] at the bottom: want \"[%s]: %s\"", v.name, v.name, want)
		case got != want:
			bad(refLine[v.name], "[%s] links to %s, want %s", v.name, got, want)
		}
		delete(refs, v.name)
	}
	for name := range refs {
		bad(refLine[name], "a link reference for [%s], which is no version's heading", name)
	}
	return versions, problems
}

// TestChangelog: CHANGELOG.md is in Keep a Changelog's form (parseChangelog), its latest release
// is VERSION's, so that the tarballs and the image tagged VERSION ship the notes of that
// version, and the chart's version (Chart.yaml) is named in the section it ships in (Unreleased
// until the release, then the release's) as "Helm chart <version>", so that a change of the
// chart that raises its version has its entry, and an entry names the version a user upgrades to.
func TestChangelog(t *testing.T) {
	raw, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	versions, problems := parseChangelog(string(raw))
	for _, p := range problems {
		t.Error(p)
	}
	version := strings.TrimSpace(string(must(os.ReadFile("VERSION"))))
	if len(versions) < 2 || versions[1].name != version {
		t.Errorf("VERSION is %s, CHANGELOG.md's latest release is not: add its \"## [%s] - YYYY-MM-DD\" when bumping VERSION", version, version)
	}
	chart := must(os.ReadFile("charts/provider-health-exporter/Chart.yaml"))
	m := regexp.MustCompile(`(?m)^version: (\S+)$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no version")
	}
	for _, v := range versions[:min(2, len(versions))] {
		if strings.Contains(v.body, "Helm chart "+string(m[1])+":") {
			return
		}
	}
	t.Errorf("neither CHANGELOG.md's Unreleased section nor its latest release names \"Helm chart %s:\", Chart.yaml's version: "+
		"raise the chart's version with its changes and say so in their entry", m[1])
}

// flagArg is a command-line flag a manifest passes, as an item of a container's args.
var flagArg = regexp.MustCompile(`(?m)^\s*- "?--([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*)`)

// unreleasedFlags returns, of flags (flag name to the file naming it), those that no released
// section of the CHANGELOG up to version introduces: names as "`--flag`" (or "`--flag=...`",
// "`--flag ...`"). Sorted by flag.
func unreleasedFlags(versions []changelogVersion, version [3]int, flags map[string]string) []string {
	var missing []string
	for flag := range flags {
		named := regexp.MustCompile("`--" + regexp.QuoteMeta(flag) + "[`= ]")
		found := false
		for _, v := range versions {
			if v.name != "Unreleased" && slices.Compare(v.semver[:], version[:]) <= 0 && named.MatchString(v.body) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, flag)
		}
	}
	slices.Sort(missing)
	return missing
}

// TestChartFlagsAreReleased: every flag the chart's templates and deploy/'s manifests pass to
// the exporter was introduced by a release the chart's appVersion includes, so that the image
// the chart and deploy/ default to (tag "v" + appVersion) knows it: a chart that needs an
// unreleased flag comes with a new release (CONTRIBUTING.md). A CHANGELOG entry names the flags
// it introduces, in backticks.
func TestChartFlagsAreReleased(t *testing.T) {
	versions, _ := parseChangelog(string(must(os.ReadFile("CHANGELOG.md"))))
	chart := must(os.ReadFile("charts/provider-health-exporter/Chart.yaml"))
	m := regexp.MustCompile(`(?m)^appVersion: "?(\d+)\.(\d+)\.(\d+)"?$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion X.Y.Z")
	}
	var app [3]int
	for i := range 3 {
		app[i], _ = strconv.Atoi(string(m[i+1]))
	}
	flags := map[string]string{}
	files := must(filepath.Glob("charts/provider-health-exporter/templates/*.yaml"))
	files = append(files, must(filepath.Glob("deploy/*.yaml"))...)
	files = append(files, must(filepath.Glob("deploy/*/*.yaml"))...)
	for _, f := range files {
		for _, fm := range flagArg.FindAllStringSubmatch(string(must(os.ReadFile(f))), -1) {
			flags[fm[1]] = f
		}
	}
	for _, want := range []string{"shard.enabled", "crd.enabled", "config.file"} {
		if flags[want] == "" {
			t.Fatalf("found no --%s in %d files of the chart and deploy/: the flags are not read (%v)", want, len(files), flags)
		}
	}
	for _, flag := range unreleasedFlags(versions, app, flags) {
		t.Errorf("%s passes --%s, which no released section of CHANGELOG.md up to the chart's appVersion %s introduces: "+
			"cut a release with it (CONTRIBUTING.md), or name the flag in the entry that introduced it", flags[flag], flag, fmt.Sprintf("%d.%d.%d", app[0], app[1], app[2]))
	}
}

// TestUnreleasedFlags: a flag named only under [Unreleased], or only in a release after the
// version, is reported; one named in a release up to the version is not.
func TestUnreleasedFlags(t *testing.T) {
	const text = "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- `--c` is new.\n\n" +
		"## [0.2.0] - 2026-12-05\n\n### Added\n\n- `--b=X` sets b.\n\n## [0.1.0] - 2026-12-03\n\n### Added\n\n- `--a` and `--ab.c DURATION`; not --d.\n\n" +
		"[Unreleased]: " + changelogRepo + "/compare/v0.2.0...HEAD\n" +
		"[0.2.0]: " + changelogRepo + "/compare/v0.1.0...v0.2.0\n" +
		"[0.1.0]: " + changelogRepo + "/releases/tag/v0.1.0\n"
	versions, problems := parseChangelog(text)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	flags := map[string]string{"a": "f", "ab.c": "f", "b": "f", "c": "f", "d": "f", "ab": "f"}
	if got, want := unreleasedFlags(versions, [3]int{0, 1, 0}, flags), []string{"ab", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("up to 0.1.0: %v, want %v", got, want)
	}
	if got, want := unreleasedFlags(versions, [3]int{0, 2, 0}, flags), []string{"ab", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("up to 0.2.0: %v, want %v", got, want)
	}
}
