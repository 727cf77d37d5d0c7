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
		m := LabelMatch{Name: name, Value: value}
		if !slices.Contains(f.Labels, m) {
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

// LabelList is the filter's labels, name=value, comma-separated.
func (f Filter) LabelList() string {
	s := make([]string, len(f.Labels))
	for i, l := range f.Labels {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

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
