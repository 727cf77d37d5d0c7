package exporter

// The status page's words: times, durations, counts, labels and strips, written the same way
// in every place of the page.

import (
	"fmt"
	"html/template"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

func verdictWord(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// landingStrip builds a target's strip from its recent checks, one cell each, <i class="C"></i>
// with C one of o (the check read Ready), f (it read another reason), n (the round did not
// contact the target), m (in maintenance): built here from those constants alone, so that a
// page of 250 rows does not run the template's escaping 7,500 times. The second result is its
// summary (the strip's title): how many of each reason, from when.
func landingStrip(rs []checks.RecentCheck) (template.HTML, string) {
	if len(rs) == 0 {
		return "", ""
	}
	var cells strings.Builder
	cells.Grow(len(rs) * len(`<i class="o"></i>`))
	counts := map[string]int{}
	var order []string
	for _, c := range rs {
		what := string(c.Reason)
		switch {
		case c.NotContacted:
			cells.WriteString(`<i class="n"></i>`)
			what = "not contacted"
		case c.Up:
			cells.WriteString(`<i class="o"></i>`)
		case c.Reason == checks.ReasonMaintenance:
			cells.WriteString(`<i class="m"></i>`)
		default:
			cells.WriteString(`<i class="f"></i>`)
		}
		if counts[what] == 0 {
			order = append(order, what)
		}
		counts[what]++
	}
	parts := make([]string, len(order))
	for i, w := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[w], w)
	}
	return template.HTML(cells.String()), fmt.Sprintf("the last %d checks, oldest first, from %s: %s", len(rs), formatTime(rs[0].At), strings.Join(parts, ", "))
}

// percent is n/d as a percentage with one decimal, never rounded up to 100% nor down to 0%.
func percent(n, d int) string {
	p := float64(n) * 100 / float64(d)
	switch {
	case n == d:
		return "100%"
	case n == 0:
		return "0%"
	case p > 99.9:
		return "99.9%"
	case p < 0.1:
		return "0.1%"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + "%"
}

// probeURL is the relative URL of the debug probe of one target; both values are query-escaped.
func probeURL(provider, target string) string {
	return "probe?provider=" + url.QueryEscape(provider) + "&target=" + url.QueryEscape(target) + "&debug=true"
}

// labelString is labels as name=value, sorted by name, comma-separated.
func labelString(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ", ")
}

func landingSummary(providers, downProviders, uncheckedProviders, targets, ready, maintenance, uncheckedTargets int) string {
	if providers == 0 {
		return ""
	}
	s := fmt.Sprintf("%d provider%s, %d of %d targets ready", providers, plural(providers), ready, targets)
	if down := targets - ready - maintenance; down > 0 {
		s += fmt.Sprintf("; %d target%s down in %d provider%s", down, plural(down), downProviders, plural(downProviders))
	}
	if maintenance > 0 {
		s += fmt.Sprintf("; %d target%s in maintenance", maintenance, plural(maintenance))
	}
	if uncheckedTargets > 0 {
		s += fmt.Sprintf("; %d more target%s not checked yet", uncheckedTargets, plural(uncheckedTargets))
	}
	if uncheckedProviders > 0 {
		s += fmt.Sprintf("; %d provider%s not checked yet", uncheckedProviders, plural(uncheckedProviders))
	}
	return s + "."
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// roundDuration keeps three significant places or so: 1.234s, not 1.234567891s; 42µs, not 0s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// formatTime writes an absolute time the same way everywhere on the page, in UTC.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// humanDuration writes an elapsed time the way a person reads it at a glance: "42s", "3m",
// "5h12m", "3d4h". Precision below the largest unit or two is noise on a status page.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}
