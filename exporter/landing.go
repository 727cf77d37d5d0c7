package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/version"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
)

// landingTemplate is the status page: plain server-rendered HTML, no script. It answers "what
// is broken" at a glance for fleets of thousands of targets: one row per provider (ready/total,
// the worst reason, since when, the last check), its down targets listed under it, its ready
// ones folded in a <details> element, and a filter by provider and state (a GET form). Each
// target links to its debug probe and folds its last transitions in a <details> element of its
// own. html/template escapes every value, so a check message quoting a remote error cannot
// inject markup.
var landingTemplate = template.Must(template.New("landing").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="30">
<title>Provider Health Exporter</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
thead th { background: #eee; }
tr.provider th { background: #f6f8fa; border-top: 2px solid #888; }
tr.provider.down th { background: #ffebe9; }
.up { color: #1a7f37; font-weight: bold; }
.down { color: #cf222e; font-weight: bold; }
.maintenance { color: #9a6700; }
.unchecked { color: #666; }
.note { color: #555; font-weight: normal; }
details summary { cursor: pointer; color: #1a7f37; }
details table { margin-top: 0.4em; }
form { margin: 0.8em 0; }
td.time { white-space: nowrap; }
.pending { color: #9a6700; font-weight: normal; }
table.history { font-size: 90%; }
table.history th, table.history td { padding: 0.15em 0.4em; }
td.strip { white-space: nowrap; line-height: 0; }
td.strip i { display: inline-block; width: 5px; height: 14px; margin-right: 1px; }
td.strip i.o { background: #3fb950; }
td.strip i.f { background: #e5534b; }
td.strip i.n { background: #a0a8b0; }
td.strip i.m { background: #d4a72c; }
td.lines { white-space: pre-line; }
</style>
</head>
<body>
<h1>Provider Health Exporter</h1>
<p>Checks infrastructure providers on a schedule and exports the verdicts as Prometheus metrics.
Version {{.Version}}.</p>
<ul>
<li><a href="metrics">Metrics</a></li>
<li><a href="-/healthy">Health</a></li>
<li><a href="-/ready">Readiness</a></li>
<li><a href="api/v1/status">Status as JSON</a> (<a href="https://github.com/provider-health-exporter/provider-health-exporter/blob/main/docs/api.md">docs</a>)</li>
</ul>
<h2>Providers</h2>
{{if .ChecksOn -}}
<p>Checks run every {{.Interval}} with a timeout of {{.Timeout}}.
{{if .Round}}Round {{.Round}} started {{.RoundStarted}} ({{.RoundAgo}} ago) and took {{.RoundDuration}}.
{{- else}}No round of checks has finished yet.{{end}}
{{if .Abandoned}}Checkers abandoned at a deadline so far: {{.Abandoned}}.{{end}}</p>
{{- else -}}
<p class="note">Checks are off (--provider-check-interval=0): providers are listed, never checked.</p>
{{- end}}
{{if .HostFileProblems -}}
<table id="host-file-problems">
<thead><tr><th>Provider</th><th>Host file</th><th>Problem</th><th>Since</th><th>Hosts kept</th></tr></thead>
{{range .HostFileProblems}}<tr><td>{{.Provider}}</td><td>{{.Path}}</td><td class="down lines">{{.Err}}</td><td class="time">{{.Since}}<br><span class="note">for {{.SinceFor}}</span></td><td>{{.Kept}} (its last good read)</td></tr>
{{end -}}
</table>
{{end -}}
{{if .AllProviders -}}
<p id="summary">{{.Summary}}</p>
<form method="get" action="">
<label>Provider <select name="provider">
<option value=""{{if eq .Filter.Provider ""}} selected{{end}}>all providers</option>
{{- range .AllProviders}}
<option value="{{.}}"{{if eq $.Filter.Provider .}} selected{{end}}>{{.}}</option>
{{- end}}
</select></label>
<label>State <select name="state">
<option value=""{{if eq .Filter.State ""}} selected{{end}}>all (down listed, ready folded)</option>
<option value="down"{{if eq .Filter.State "down"}} selected{{end}}>down only</option>
<option value="up"{{if eq .Filter.State "up"}} selected{{end}}>ready only</option>
</select></label>
{{if .Filter.Reason}}<label>Reason <input type="text" name="reason" value="{{.Filter.Reason}}" size="24"></label>{{end}}
{{range .Filter.Labels}}<input type="hidden" name="label" value="{{.}}">{{end}}
<label>Label <input type="text" name="label" value="" size="20" placeholder="name=value"></label>
<button type="submit">Filter</button>
{{if .Filter.Labels}}<span class="note">labels: {{range $i, $l := .Filter.Labels}}{{if $i}}, {{end}}{{$l}}{{end}}</span>{{end}}
{{if or .Filter.Provider .Filter.State .Filter.Reason .Filter.Labels}}<a href="./">clear the filter</a>{{end}}
</form>
{{- end}}
{{if .Providers -}}
{{template "pager" .Pager}}
<table id="providers">
<thead><tr><th>Target</th><th>Verdict</th><th>Reason</th><th>Message</th><th>Since</th><th>Last contacted</th><th>Recent checks</th><th>Transitions</th></tr></thead>
{{range .Providers -}}
<tbody id="provider-{{.Name}}">
<tr class="provider{{if .Down}} down{{end}}"><th colspan="8">{{.Name}} <span class="note">({{.Type}})</span> &mdash;
{{if .Checked -}}
<span class="{{if eq .DownTotal 0}}up{{else}}down{{end}}">{{.Ready}}/{{.Total}} ready</span>
{{- if .WorstReason}} &mdash; worst reason: <span class="down">{{.WorstReason}}</span> ({{.WorstCount}} of {{.DownTotal}} down{{if .OtherReasons}}; {{.OtherReasons}} other reason{{if gt .OtherReasons 1}}s{{end}}{{end}}){{end}}
&mdash; {{if eq .DownTotal 0}}ready{{else}}down{{end}} since {{.Since}} <span class="note">for {{.SinceFor}}</span>
&mdash; last checked {{.LastChecked}} <span class="note">{{.LastCheckedAgo}} ago</span>
{{- if .RecentReady}} &mdash; recent checks: {{.RecentReady}}{{end}}
{{- else -}}
<span class="unchecked">not checked yet</span>
{{- end}}</th></tr>
{{range .Down}}{{template "row" .}}{{end -}}
{{if .Up -}}
{{if .FoldUp -}}
<tr class="folded"><td colspan="8"><details><summary>{{len .Up}} ready target{{if gt (len .Up) 1}}s{{end}}{{if lt (len .Up) .Ready}} of {{.Ready}}{{end}}</summary>
<table>
{{range .Up}}{{template "row" .}}{{end -}}
</table>
</details></td></tr>
{{- else -}}
{{range .Up}}{{template "row" .}}{{end -}}
{{end}}
{{end -}}
{{if .UncheckedNote}}<tr class="unchecked-targets"><td colspan="8" class="unchecked">{{.UncheckedNote}}</td></tr>{{end}}
{{if .MaintenanceNote}}<tr class="maintenance-targets"><td colspan="8" class="maintenance">{{.MaintenanceNote}}</td></tr>{{end}}
{{if .Hidden}}<tr><td colspan="8" class="note">{{.Hidden}}</td></tr>{{end}}
{{if .Elsewhere}}<tr><td colspan="8" class="note">{{.Elsewhere}}</td></tr>{{end}}
</tbody>
{{end -}}
</table>
{{template "pager" .Pager}}
{{- else if .AllProviders -}}
<p class="note">{{.NoMatch}}</p>
{{- else -}}
<p class="note">The providers file lists no providers.</p>
{{- end}}
{{with .Writer -}}
<h2 id="writer">ProviderHealth objects</h2>
<p>{{.State}}</p>
{{if .Problems -}}
<table id="writer-problems">
<thead><tr><th>Provider</th><th>Problem</th><th>Since</th><th>Retry</th><th>API server's answer</th></tr></thead>
{{range .Problems}}<tr><td>{{.Provider}}</td><td class="down">{{.Problem}}</td><td class="time">{{.Since}}<br><span class="note">for {{.SinceFor}}</span></td><td>{{.Retry}}</td><td>{{.Err}}</td></tr>
{{end -}}
</table>
{{- end}}
{{- end}}
<p class="note">Page generated {{.Now}}; it refreshes every 30 seconds. A provider's "since" is
when it last turned down (its first target down) or ready (its last target back), as in its
ProviderHealth object; a target's is when its verdict last changed. A verdict held by a
provider's failureThreshold or successThreshold is marked "failures pending" or "recovery
pending", with what the last check itself said. A target not checked yet (not contacted since the
exporter listed it, or its first checks have not met a threshold) has no verdict: it is counted
neither up nor down, here as in the metrics and the ProviderHealth objects. A target in
maintenance (deliberately out of service: its maintenance label, or an ESXi host in maintenance mode) is listed apart under
its provider, neither ready nor down. Recent checks shows each target's last {{.RecentLength}}
checks, oldest first, as the checks themselves read them (before the thresholds): green Ready,
red another reason (the strip's title counts them), grey a round that did not contact it,
amber maintenance; a provider's row gives the share of its recent checks that read Ready.
Each target's last {{.HistoryLength}} transitions
are listed under Transitions (none for a target unchanged since its first check); they are kept
in memory only: a restart of the exporter starts a new history. A target's name links to
a check of it run now, with debug output.</p>
</body>
</html>
{{define "pager" -}}
{{if gt .Pages 1}}<p class="pager">{{if .Last}}Targets {{.First}}&ndash;{{.Last}} of {{.Total}}{{else}}No targets on this page: the filter selects {{.Total}}{{end}} (down targets first), page {{.Page}} of {{.Pages}}:
{{if .Prev}}<a href="{{.Prev}}">&larr; previous</a>{{end}}
{{if .Next}}<a href="{{.Next}}">next &rarr;</a>{{end}}</p>{{end}}
{{- end}}
{{define "row" -}}
<tr class="target"><td><a href="{{.ProbeURL}}">{{.Target}}</a>{{if .Labels}}<br><span class="note labels">{{.Labels}}</span>{{end}}</td>
<td class="{{if .Up}}up{{else}}down{{end}}">{{if .Up}}up{{else}}down{{end}}{{if .Pending}}<br><span class="pending">{{.Pending}}</span>{{end}}</td>
<td title="{{.Meaning}}">{{.Reason}}</td><td>{{.Message}}</td>
<td class="time">{{.Since}}<br><span class="note">for {{.SinceFor}}</span></td>
<td class="time">{{.CheckedAt}}<br><span class="note">{{.CheckedAgo}} ago, took {{.Duration}}</span></td>
<td class="strip" title="{{.StripTitle}}">{{.Strip}}</td>
<td>{{if .History}}<details class="history"><summary>{{len .History}} transition{{if gt (len .History) 1}}s{{end}}</summary>
<table class="history">
<tr><th>When</th><th>From</th><th>To</th><th>Reason</th><th>Message</th></tr>
{{range .History}}<tr><td class="time">{{.When}}</td><td>{{.From}}</td><td class="{{.ToClass}}">{{.To}}</td><td>{{.Reason}}</td><td>{{.Message}}</td></tr>
{{end -}}
</table>
</details>{{end}}</td></tr>
{{end}}`))

// landingPageRows bounds the target rows of one page, listed or folded, so that a page's size
// and the memory a render takes stay the same whatever the fleet's size (about 300 bytes of HTML
// a row: well under 1 MB a page). The rows run in the page's order, down targets first; the pages
// reach every target, and the filters narrow them.
const landingPageRows = 250

// landingMaxInFlight bounds the renders of the status page running at once; a request beyond
// it answers 503, as /metrics does past its own limit.
const landingMaxInFlight = 4

type landingData struct {
	Version       string
	ChecksOn      bool
	Interval      time.Duration
	Timeout       time.Duration
	Round         uint64
	RoundStarted  string
	RoundAgo      string
	RoundDuration time.Duration
	Abandoned     uint64
	// Summary counts providers and targets over the whole snapshot, whatever the filter.
	Summary string
	// AllProviders names every configured provider, for the filter.
	AllProviders []string
	Filter       landingFilter
	// Providers are those the filter selects: the ones with down targets first, then those not
	// checked yet, then the healthy ones, each group in the providers file's order. Every
	// selected provider's row is on every page; its targets only on the pages whose window
	// holds them.
	Providers []landingProvider
	Pager     landingPager
	// NoMatch says why no provider is shown.
	NoMatch string
	Now     string
	// HistoryLength is how many transitions per target are kept, RecentLength how many checks.
	HistoryLength int
	RecentLength  int
	// Writer is the ProviderHealth writer's section; nil without --crd.enabled.
	Writer *landingWriter
	// HostFileProblems are the host files (hostFiles) that do not read well now.
	HostFileProblems []landingHostFileProblem
}

// landingHostFileProblem is a host file that does not read well: its provider keeps the hosts
// of its last good read.
type landingHostFileProblem struct {
	Provider, Path, Err, Since, SinceFor string
	Kept                                 int
}

// landingWriter is what the ProviderHealth writer is doing: whether this replica writes, and
// the objects it cannot write.
type landingWriter struct {
	State    string
	Problems []landingObjectProblem
}

type landingObjectProblem struct {
	Provider, Problem, Since, SinceFor, Retry, Err string
}

// landingWriterOf describes the writer's report r for the page.
func landingWriterOf(r crdwriter.Report, now time.Time) *landingWriter {
	w := &landingWriter{}
	switch {
	case !r.Writing:
		w.State = "This replica does not write the ProviderHealth objects now: another replica holds the Lease (--crd.leader-elect), or the writer has not started writing yet."
	case len(r.Problems) == 0:
		w.State = fmt.Sprintf("This replica writes the ProviderHealth objects; every provider's object is written (round %d synced).", r.SyncedRound)
	default:
		w.State = fmt.Sprintf("This replica writes the ProviderHealth objects; %d cannot be written now (the others are written as usual; round %d synced):", len(r.Problems), r.SyncedRound)
	}
	for _, p := range r.Problems {
		lp := landingObjectProblem{Provider: p.Provider, Problem: p.Problem, Since: formatTime(p.Since), SinceFor: humanDuration(now.Sub(p.Since)), Err: p.Err}
		switch p.Problem {
		case crdwriter.ProblemFailing:
			lp.Retry = fmt.Sprintf("%d failed write%s; next attempt in %s", p.Attempts, plural(p.Attempts), humanDuration(p.RetryAt.Sub(now)))
		case crdwriter.ProblemRejected:
			lp.Retry = "when its status changes, or after the heartbeat interval"
		case crdwriter.ProblemNameClash:
			lp.Retry = "never written: the object of this name is not this deployment's (see the writer's log)"
		}
		w.Problems = append(w.Problems, lp)
	}
	return w
}

// landingFilter is the page's query: provider (empty: all), state ("", "down" or "up"), reason
// (empty: all), labels (every one a target must have; none: all) and the page (from 1).
type landingFilter struct {
	Provider string
	State    string
	Reason   checks.Reason
	Labels   []labelMatch
	Page     int
}

// labelMatch is one label=value of the filter: a target matches when its labels (its
// provider's, with its own over them) hold Name with exactly Value.
type labelMatch struct{ Name, Value string }

func (l labelMatch) String() string { return l.Name + "=" + l.Value }

// narrows reports whether the filter selects fewer rows than the whole page (beyond the
// provider): a reason or labels, or a state.
func (f landingFilter) narrows() bool { return f.State != "" || f.Reason != "" || len(f.Labels) > 0 }

// matches reports whether target t of provider ps has the filter's reason and labels.
func (f landingFilter) matches(ps *checks.ProviderState, t *checks.TargetState) bool {
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

// landingPager says which of the selected target rows this page shows, and links its
// neighbours.
type landingPager struct {
	Page, Pages int
	// First and Last number the rows shown (from 1); both 0 when the page shows none.
	First, Last int
	// Total counts the rows the filter selects, over all pages.
	Total      int
	Prev, Next string
}

// Errors answered with 400.
var (
	errBadState = errors.New(`unknown state: use "down", "up" or nothing`)
	errBadPage  = errors.New("page must be a whole number from 1")
)

func parseLandingFilter(q url.Values) (landingFilter, error) {
	f := landingFilter{Provider: q.Get("provider"), State: q.Get("state"), Reason: checks.Reason(q.Get("reason")), Page: 1}
	switch f.State {
	case "", "down", "up":
	default:
		return f, errBadState
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
		m := labelMatch{Name: name, Value: value}
		if !slices.Contains(f.Labels, m) {
			f.Labels = append(f.Labels, m)
		}
	}
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return f, errBadPage
		}
		f.Page = n
	}
	return f, nil
}

// url is the page's address with filter f on page n, relative to the page itself.
func (f landingFilter) url(n int) string {
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

// landingProvider is one provider's row and the targets listed under it.
type landingProvider struct {
	Name    string
	Type    checks.ProviderType
	Checked bool
	Ready   int
	Total   int
	// DownTotal counts the down targets, listed or not.
	DownTotal int
	// WorstReason is the reason most down targets share (ties: the first in the type's
	// catalogue, which lists a KVM host's dial stages in order); WorstCount counts them and
	// OtherReasons the other reasons among the down targets.
	WorstReason  checks.Reason
	WorstCount   int
	OtherReasons int
	// Since is the ProviderHealth Ready condition's transition time computed from the snapshot:
	// while a target is down, the earliest Since of the down targets; when all are ready, the
	// latest Since (when the last one came back).
	Since    string
	SinceFor string
	// LastChecked is the newest CheckedAt of its targets.
	LastChecked    string
	LastCheckedAgo string
	// RecentReady is the share of its recent checks that read Ready (recentReady).
	RecentReady string
	// Down are the down targets on this page, listed; Up the ready ones, folded when FoldUp.
	Down   []landingRow
	Up     []landingRow
	FoldUp bool
	// Hidden says which targets the state filter leaves out; Elsewhere, which of the selected
	// ones are on other pages.
	Hidden    string
	Elsewhere string
	// Unchecked counts its targets without a verdict yet (neither up nor down: not contacted
	// since they were listed, or their first checks have not met a threshold); UncheckedNote
	// names the first landingUncheckedNames of them and why they have no verdict.
	Unchecked     int
	UncheckedNote string
	// Maintenance counts its targets in maintenance (deliberately out of service: neither
	// ready nor down, listed apart); MaintenanceNote names the first landingUncheckedNames.
	Maintenance     int
	MaintenanceNote string

	ps *checks.ProviderState
	// selected counts the rows the filter selects: selDown of its down targets unless state
	// is "up", selUp of its ready ones unless state is "down" (with a reason filter, only those
	// of that reason).
	selected, selDown, selUp int
	filter                   landingFilter
	// selMaint counts its targets in maintenance the filter selects (listed apart, not rows).
	selMaint int
}

// landingRow is one target.
type landingRow struct {
	Target string
	// Labels are the target's labels (its provider's, with its own over them), name=value
	// sorted by name; "" when it has none.
	Labels string
	// ProbeURL is the relative URL of a check of the target run now, with debug output.
	ProbeURL string
	Up       bool
	Reason   checks.Reason
	// Meaning is the reason's one-line meaning from its type's catalogue (the cell's title).
	Meaning    string
	Message    string
	Since      string
	SinceFor   string
	CheckedAt  string
	CheckedAgo string
	Duration   time.Duration
	// Pending says that a threshold holds the verdict, and what the last check said.
	Pending string
	// History lists the target's last transitions, newest first.
	History []landingTransition
	// Strip is its recent checks, oldest first (checks.TargetState.Recent), one cell each;
	// StripTitle sums them up.
	Strip      template.HTML
	StripTitle string

	// ts is the row's target, for the JSON API (api.go).
	ts *checks.TargetState
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

// recentReady is the share of a provider's recent checks (every target's strip, the rounds
// that did not contact a target and maintenance left out) that read Ready, for its row: "" when
// there are none.
func recentReady(ps *checks.ProviderState) string {
	ready, all := recentCounts(ps)
	if all == 0 {
		return ""
	}
	return fmt.Sprintf("%s ready (%d of %d)", percent(ready, all), ready, all)
}

// recentCounts counts a provider's recent checks that contacted a target outside maintenance,
// and those of them that read Ready.
func recentCounts(ps *checks.ProviderState) (ready, all int) {
	for i := range ps.Targets {
		for _, c := range ps.Targets[i].Recent {
			if c.NotContacted || c.Reason == checks.ReasonMaintenance {
				continue
			}
			all++
			if c.Up {
				ready++
			}
		}
	}
	return ready, all
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

// landingTransition is one transition of a target's verdict.
type landingTransition struct {
	When    string
	From    string
	To      string
	ToClass string
	Reason  checks.Reason
	Message string
}

// probeURL is the relative URL of the debug probe of one target; both values are query-escaped.
func probeURL(provider, target string) string {
	return "probe?provider=" + url.QueryEscape(provider) + "&target=" + url.QueryEscape(target) + "&debug=true"
}

// pendingNote says that a threshold holds t's verdict, and what the last check said; "" when
// none does.
func pendingNote(t *checks.TargetState) string {
	switch {
	case t.FailuresPending():
		return fmt.Sprintf("failures pending (%d of %d): %s", t.ConsecutiveFailures, t.Thresholds.Failure, t.CheckReason)
	case t.RecoveryPending():
		return fmt.Sprintf("recovery pending (%d of %d): %s", t.ConsecutiveSuccesses, t.Thresholds.Success, t.CheckReason)
	}
	return ""
}

// landingHistory lists h newest first, at most checks.HistoryLength of them; none when the
// target has not changed since its first verdict (its row already says all of it).
func landingHistory(h []checks.Transition) []landingTransition {
	if len(h) == 1 && h[0].First {
		return nil
	}
	h = h[max(0, len(h)-checks.HistoryLength):]
	out := make([]landingTransition, 0, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		tr := &h[i]
		lt := landingTransition{When: formatTime(tr.At), From: "none (first check)", To: verdictWord(tr.Up),
			ToClass: verdictWord(tr.Up), Reason: tr.Reason, Message: tr.Message}
		if !tr.First {
			lt.From = verdictWord(tr.FromUp)
			if !tr.FromUp {
				lt.From += " (" + string(tr.FromReason) + ")"
			}
		}
		out = append(out, lt)
	}
	return out
}

func verdictWord(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// serveLanding renders the status page from the current snapshot, at most landingMaxInFlight
// at once.
func (e *Exporter) serveLanding(w http.ResponseWriter, r *http.Request) {
	select {
	case e.landingSlots <- struct{}{}:
		defer func() { <-e.landingSlots }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("too many renders of the status page in flight (at most %d): retry in a moment", cap(e.landingSlots)), http.StatusServiceUnavailable)
		return
	}
	e.renderLanding(w, r, e.runner.Current(), time.Now())
}

// renderLanding renders the status page of snapshot s, filtered by r's query.
func (e *Exporter) renderLanding(w http.ResponseWriter, r *http.Request, s *checks.Snapshot, now time.Time) {
	f, err := parseLandingFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	data := e.landingData(s, f, now)
	// Render into a buffer so that a template error is a clean 500, not half a page.
	var buf bytes.Buffer
	if err := landingTemplate.Execute(&buf, data); err != nil {
		e.logger.Error("rendering the landing page", "err", err)
		http.Error(w, "rendering the landing page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (e *Exporter) landingData(s *checks.Snapshot, f landingFilter, now time.Time) landingData {
	f.Page = max(f.Page, 1)
	d := landingData{
		Version:       version.Version,
		ChecksOn:      e.ChecksOn(),
		Interval:      e.interval,
		Timeout:       e.timeout,
		Round:         s.Round,
		RoundDuration: roundDuration(s.RoundDuration),
		Abandoned:     s.AbandonedTotal,
		Filter:        f,
		Now:           formatTime(now),
		HistoryLength: checks.HistoryLength,
		RecentLength:  checks.RecentLength,
	}
	if d.Version == "" {
		d.Version = "(development build)"
	}
	if e.CRDReport != nil {
		d.Writer = landingWriterOf(e.CRDReport(), now)
	}
	for _, p := range e.inventory.problems() {
		d.HostFileProblems = append(d.HostFileProblems, landingHostFileProblem{Provider: p.Provider, Path: p.Path,
			Err: strings.Join(p.lines(), "\n"), Since: formatTime(p.Since), SinceFor: humanDuration(now.Sub(p.Since)), Kept: p.Kept})
	}
	if s.Round > 0 {
		d.RoundStarted = formatTime(s.RoundStarted)
		d.RoundAgo = humanDuration(now.Sub(s.RoundStarted))
	}
	var down, unchecked, healthy []landingProvider
	var targets, ready, maintenance, downProviders, uncheckedProviders, uncheckedTargets int
	for i := range s.Providers {
		ps := &s.Providers[i]
		d.AllProviders = append(d.AllProviders, ps.Name)
		p := landingProviderOf(ps, f, now)
		targets += p.Total
		ready += p.Ready
		maintenance += p.Maintenance
		uncheckedTargets += p.Unchecked
		switch {
		case !p.Checked:
			uncheckedProviders++
		case p.DownTotal > 0:
			downProviders++
		}
		if f.Provider != "" && ps.Name != f.Provider {
			continue
		}
		switch {
		case f.narrows() && p.selected == 0 && p.selMaint == 0:
			continue
		case !p.Checked:
			unchecked = append(unchecked, p)
		case p.DownTotal > 0:
			down = append(down, p)
		default:
			healthy = append(healthy, p)
		}
	}
	d.Providers = slices.Concat(down, unchecked, healthy)
	d.Pager = paginate(d.Providers, f, now)
	d.Summary = landingSummary(len(s.Providers), downProviders, uncheckedProviders, targets, ready, maintenance, uncheckedTargets)
	switch {
	case f.Provider != "" && !slices.Contains(d.AllProviders, f.Provider):
		d.NoMatch = fmt.Sprintf("No provider is named %q.", f.Provider)
	case f.Reason != "" && len(f.Labels) > 0:
		d.NoMatch = fmt.Sprintf("No target reads %s with the labels %s.", f.Reason, f.labelList())
	case f.Reason != "":
		d.NoMatch = fmt.Sprintf("No target reads %s.", f.Reason)
	case len(f.Labels) > 0:
		d.NoMatch = fmt.Sprintf("No target has the labels %s.", f.labelList())
	case f.State == "down":
		d.NoMatch = "No target is down."
	case f.State == "up":
		d.NoMatch = "No target is ready."
	}
	return d
}

// paginate lays the selected target rows end to end in the page's order (the down targets of
// every provider first, provider by provider, then the ready ones) and fills in those of page
// f.Page: only the rows on the page are built, so a render's memory does not grow with the fleet.
func paginate(providers []landingProvider, f landingFilter, now time.Time) landingPager {
	lo := (f.Page - 1) * landingPageRows
	hi := lo + landingPageRows
	offset := 0
	shown := make([]int, len(providers))
	for _, up := range []bool{false, true} {
		if up && f.State == "down" || !up && f.State == "up" {
			continue
		}
		for i := range providers {
			p := &providers[i]
			n := p.selDown
			if up {
				n = p.selUp
			}
			if from, to := max(lo-offset, 0), min(hi-offset, n); from < to {
				p.fill(up, from, to, now)
				shown[i] += to - from
			}
			offset += n
		}
	}
	for i := range providers {
		switch p := &providers[i]; {
		case shown[i] == p.selected:
		case shown[i] == 0 && p.selected == 1:
			p.Elsewhere = "Its target is on another page."
		case shown[i] == 0:
			p.Elsewhere = fmt.Sprintf("Its %d targets are on other pages.", p.selected)
		default:
			p.Elsewhere = fmt.Sprintf("%d of its %d targets are on this page, the others on other pages.", shown[i], p.selected)
		}
	}
	pg := landingPager{Page: f.Page, Pages: max(1, (offset+landingPageRows-1)/landingPageRows), Total: offset}
	if lo < offset {
		pg.First, pg.Last = lo+1, min(hi, offset)
	}
	if f.Page > 1 {
		pg.Prev = f.url(min(f.Page-1, pg.Pages))
	}
	if f.Page < pg.Pages {
		pg.Next = f.url(f.Page + 1)
	}
	return pg
}

// landingProviderOf summarizes one provider for the page; fill builds the rows of its targets
// that the page shows.
func landingProviderOf(ps *checks.ProviderState, f landingFilter, now time.Time) landingProvider {
	state := f.State
	p := landingProvider{Name: ps.Name, Type: ps.Type, Checked: len(ps.Targets) > 0, Total: len(ps.Targets), FoldUp: !f.narrows(), ps: ps, filter: f}
	p.Unchecked, p.UncheckedNote = uncheckedNote(ps.Unchecked, now)
	if !p.Checked {
		return p
	}
	var lastChecked, firstDown, lastFlip time.Time
	reasons := map[checks.Reason]int{}
	var maintenance []string
	for i := range ps.Targets {
		t := &ps.Targets[i]
		if t.CheckedAt.After(lastChecked) {
			lastChecked = t.CheckedAt
		}
		if t.Since.After(lastFlip) {
			lastFlip = t.Since
		}
		matches := f.matches(ps, t)
		if t.Up {
			p.Ready++
			if matches {
				p.selUp++
			}
			continue
		}
		if inMaintenance(t) {
			if state == "" && matches {
				p.selMaint++
			}
			if len(maintenance) < landingUncheckedNames {
				maintenance = append(maintenance, fmt.Sprintf("%s (since %s)", t.Target, formatTime(t.Since)))
			}
			p.Maintenance++
			continue
		}
		p.DownTotal++
		if matches {
			p.selDown++
		}
		reasons[t.Reason]++
		if firstDown.IsZero() || t.Since.Before(firstDown) {
			firstDown = t.Since
		}
	}
	if p.Maintenance > 0 {
		list := strings.Join(maintenance, ", ")
		if more := p.Maintenance - len(maintenance); more > 0 {
			list += fmt.Sprintf(" and %d more", more)
		}
		p.MaintenanceNote = fmt.Sprintf("%d target%s in maintenance, counted neither ready nor down: %s.", p.Maintenance, plural(p.Maintenance), list)
	}
	if state == "up" {
		p.selDown = 0
	}
	if state == "down" {
		p.selUp = 0
	}
	p.selected = p.selDown + p.selUp
	since := lastFlip
	if p.DownTotal > 0 {
		since = firstDown
		p.WorstReason, p.WorstCount = worstReason(ps.Type, reasons)
		p.OtherReasons = len(reasons) - 1
	}
	p.Since, p.SinceFor = formatTime(since), humanDuration(now.Sub(since))
	p.LastChecked, p.LastCheckedAgo = formatTime(lastChecked), humanDuration(now.Sub(lastChecked))
	p.RecentReady = recentReady(ps)
	switch hidden := p.Total - p.Maintenance - p.selected; {
	case hidden == 0:
	case f.Reason != "" || len(f.Labels) > 0:
		p.Hidden = fmt.Sprintf("%d target%s of other reasons, labels or states not shown (filter: %s).", hidden, plural(hidden), f.describe())
	case state == "down":
		p.Hidden = fmt.Sprintf("%d ready target%s not shown (state filter: down only).", hidden, plural(hidden))
	case state == "up":
		p.Hidden = fmt.Sprintf("%d down target%s not shown (state filter: ready only).", hidden, plural(hidden))
	}
	return p
}

// landingUncheckedNames bounds the names of a provider's unchecked targets the page lists: after
// a start of a large fleet they can be thousands, and they have nothing to show but a name.
const landingUncheckedNames = 20

// uncheckedNote says which of a provider's targets have no verdict yet, since when, and why
// (the first one's note: "not started: ..." or its first checks' count).
func uncheckedNote(us []checks.UncheckedTarget, now time.Time) (int, string) {
	if len(us) == 0 {
		return 0, ""
	}
	names := make([]string, 0, min(len(us), landingUncheckedNames))
	oldest := us[0].Listed
	for i := range us {
		if len(names) < landingUncheckedNames {
			names = append(names, us[i].Target)
		}
		if us[i].Listed.Before(oldest) {
			oldest = us[i].Listed
		}
	}
	list := strings.Join(names, ", ")
	if more := len(us) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	note := fmt.Sprintf("%d target%s not checked yet, counted neither up nor down (listed %s, %s ago): %s.",
		len(us), plural(len(us)), formatTime(oldest), humanDuration(now.Sub(oldest)), list)
	if us[0].Message != "" {
		note += fmt.Sprintf(" %s: %s", us[0].Target, us[0].Message)
	}
	return len(us), note
}

// fill builds the rows from..to-1 of the provider's down targets (up false) or ready ones (up
// true), in the providers file's order.
func (p *landingProvider) fill(up bool, from, to int, now time.Time) {
	k := 0
	for i := range p.ps.Targets {
		t := &p.ps.Targets[i]
		if t.Up != up || inMaintenance(t) || !p.filter.matches(p.ps, t) {
			continue
		}
		if k >= to {
			return
		}
		if k >= from {
			if up {
				p.Up = append(p.Up, landingRowOf(p.ps, t, now))
			} else {
				p.Down = append(p.Down, landingRowOf(p.ps, t, now))
			}
		}
		k++
	}
}

// labelList is the filter's labels, name=value, comma-separated.
func (f landingFilter) labelList() string {
	s := make([]string, len(f.Labels))
	for i, l := range f.Labels {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

// describe says what the filter's reason and labels select, for the page's notes.
func (f landingFilter) describe() string {
	var parts []string
	if f.Reason != "" {
		parts = append(parts, "reason "+string(f.Reason))
	}
	if len(f.Labels) > 0 {
		parts = append(parts, "labels "+f.labelList())
	}
	return strings.Join(parts, ", ")
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

// inMaintenance reports a target deliberately out of service: the page lists it apart.
func inMaintenance(t *checks.TargetState) bool {
	return !t.Up && t.Reason == checks.ReasonMaintenance
}

func landingRowOf(ps *checks.ProviderState, t *checks.TargetState, now time.Time) landingRow {
	typ := ps.Type
	r := landingRow{
		Target:   t.Target,
		Labels:   labelString(ps.Labels.Of(t.Target)),
		ProbeURL: probeURL(ps.Name, t.Target),
		Up:       t.Up,
		Reason:   t.Reason,
		// The catalogue marks names with backticks, as Markdown does; a title shows them bare.
		Meaning:    strings.ReplaceAll(checks.Meaning(typ, t.Reason), "`", ""),
		Message:    t.Message,
		Since:      formatTime(t.Since),
		SinceFor:   humanDuration(now.Sub(t.Since)),
		CheckedAt:  formatTime(t.CheckedAt),
		CheckedAgo: humanDuration(now.Sub(t.CheckedAt)),
		Duration:   roundDuration(t.Duration),
		Pending:    pendingNote(t),
		History:    landingHistory(t.History),
		ts:         t,
	}
	r.Strip, r.StripTitle = landingStrip(t.Recent)
	return r
}

// worstReason returns the reason most down targets share; a tie goes to the reason listed first
// in the provider type's catalogue (for KVM: the earliest dial stage), then by name.
func worstReason(typ checks.ProviderType, counts map[checks.Reason]int) (checks.Reason, int) {
	catalogue := checks.Reasons(typ)
	rank := func(r checks.Reason) int {
		if i := slices.Index(catalogue, r); i >= 0 {
			return i
		}
		return len(catalogue)
	}
	var worst checks.Reason
	n := 0
	for r, c := range counts {
		if c > n || c == n && (rank(r) < rank(worst) || rank(r) == rank(worst) && r < worst) {
			worst, n = r, c
		}
	}
	return worst, n
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
