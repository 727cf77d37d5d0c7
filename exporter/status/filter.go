package status

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// Filter is a status query: provider (empty: all), state ("", "down" or "up"), reason (empty:
// all), labels (every one a target must have; none: all) and the page (from 1).
type Filter struct {
	Provider string
	State    string
	Reason   checks.Reason
	Labels   []LabelMatch
	Page     int
}

// LabelMatch is one label=value of the filter: a target matches when its labels (its
// provider's, with its own over them) hold Name with exactly Value.
type LabelMatch struct{ Name, Value string }

func (l LabelMatch) String() string { return l.Name + "=" + l.Value }

// Errors of ParseFilter, answered with 400.
var (
	ErrBadState = errors.New(`unknown state: use "down", "up" or nothing`)
	ErrBadPage  = errors.New("page must be a whole number from 1")
)

// ParseFilterQuery is ParseFilter of a request's raw query: a query net/url refuses (more
// parameters than it parses, a bad escape) is an error, never read as no filter.
func ParseFilterQuery(raw string) (Filter, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return Filter{Page: 1}, fmt.Errorf("query: %w", err)
	}
	return ParseFilter(q)
}

// ParseFilter reads a filter from a query: provider, state, reason, label (repeatable,
// name=value) and page.
func ParseFilter(q url.Values) (Filter, error) {
	f := Filter{Provider: q.Get("provider"), State: q.Get("state"), Reason: checks.Reason(q.Get("reason")), Page: 1}
	switch f.State {
	case "", "down", "up":
	default:
		return f, ErrBadState
	}
	if f.Reason != "" && !slices.ContainsFunc(checks.Registered(), func(t *checks.Type) bool { return checks.ValidReason(t.Name, f.Reason) }) {
		return f, fmt.Errorf("unknown reason %q: use a reason of a provider type's catalogue (docs/reasons.md), or nothing", f.Reason)
	}
	seen := make(map[LabelMatch]bool)
	for _, l := range q["label"] {
		if l == "" {
			continue // the form's empty label field
		}
		name, value, ok := strings.Cut(l, "=")
		if !ok {
			return f, fmt.Errorf("label %q: want name=value (a target's label and its exact value)", l)
		}
		if p := config.LabelNameProblem(name); p != "" {
			return f, fmt.Errorf("label %q: %s", l, p)
		}
		// A repeated label=value is taken once (a map: a long query stays linear).
		m := LabelMatch{Name: name, Value: value}
		if !seen[m] {
			seen[m] = true
			f.Labels = append(f.Labels, m)
		}
	}
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return f, ErrBadPage
		}
		f.Page = n
	}
	return f, nil
}

// Narrows reports whether the filter selects fewer rows than the whole page (beyond the
// provider): a reason or labels, or a state.
func (f Filter) Narrows() bool { return f.State != "" || f.Reason != "" || len(f.Labels) > 0 }

// Matches reports whether target t of provider ps has the filter's reason and labels.
func (f Filter) Matches(ps *checks.ProviderState, t *checks.TargetState) bool {
	if f.Reason != "" && t.Reason != f.Reason {
		return false
	}
	if len(f.Labels) == 0 {
		return true
	}
	ls := ps.Labels.Of(t.Target)
	for _, l := range f.Labels {
		if v, ok := ls[l.Name]; !ok || v != l.Value {
			return false
		}
	}
	return true
}

// URL is the status page's address with the filter on page n, relative to the page itself.
func (f Filter) URL(n int) string {
	v := url.Values{}
	if f.Provider != "" {
		v.Set("provider", f.Provider)
	}
	if f.State != "" {
		v.Set("state", f.State)
	}
	if f.Reason != "" {
		v.Set("reason", string(f.Reason))
	}
	for _, l := range f.Labels {
		v.Add("label", l.String())
	}
	if n > 1 {
		v.Set("page", strconv.Itoa(n))
	}
	if len(v) == 0 {
		return "./"
	}
	return "?" + v.Encode()
}

// maxListedLabels is how many of the filter's labels a note names (LabelList): the notes are
// repeated per provider, so a query of many labels must not be repeated whole in each.
const maxListedLabels = 5

// LabelList is the filter's labels, name=value, comma-separated: the first maxListedLabels,
// then how many more.
func (f Filter) LabelList() string {
	n := min(len(f.Labels), maxListedLabels)
	s := make([]string, n)
	for i, l := range f.Labels[:n] {
		s[i] = clipLabel(l.String())
	}
	list := strings.Join(s, ", ")
	if more := len(f.Labels) - n; more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return list
}

// clipLabel cuts one name=value of a note at 100 bytes.
func clipLabel(s string) string { return checks.Clip(s, 100) }

// Describe says what the filter's reason and labels select.
func (f Filter) Describe() string {
	var parts []string
	if f.Reason != "" {
		parts = append(parts, "reason "+string(f.Reason))
	}
	if len(f.Labels) > 0 {
		parts = append(parts, "labels "+f.LabelList())
	}
	return strings.Join(parts, ", ")
}
