package exporter

import (
	"bytes"
	"embed"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/version"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/exporter/status"
)

// The status page is a view of the status model (exporter/status), the one the JSON API
// encodes: landingData turns a status.Status into the page's words and times, and
// templates/landing.html lays them out: plain server-rendered HTML, no script. It answers "what
// is broken" at a glance for fleets of thousands of targets: one row per provider (ready/total,
// the worst reason, since when, the last check), its down targets listed under it, its ready
// ones folded in a <details> element, and a filter by provider and state (a GET form). Each
// target links to its debug probe and folds its last transitions in a <details> element of its
// own. html/template escapes every value, so a check message quoting a remote error cannot
// inject markup.

//go:embed templates/landing.html
var templates embed.FS

var landingTemplate = template.Must(template.ParseFS(templates, "templates/landing.html"))

// landingFilter is the page's query (status.Filter).
type landingFilter = status.Filter

// landingPageRows bounds the target rows of one page (status.PageRows): about 300 bytes of HTML
// a row, well under 1 MB a page.
const landingPageRows = status.PageRows

// landingUncheckedNames bounds the names of a provider's unchecked targets, and of those in
// maintenance, the page lists (status.NamesLimit).
const landingUncheckedNames = status.NamesLimit

// landingMaxInFlight bounds the renders of the status page running at once; a request beyond
// it answers 503, as /metrics does past its own limit.
const landingMaxInFlight = 4

type landingData struct {
	// LabelInputs are the filter's labels as the form's hidden inputs, built once
	// (labelInputs): a query of 10,000 labels is not 10,000 template actions.
	LabelInputs template.HTML
	// Prefix is what the page's links start with: empty (links relative to the page, served at
	// the root), or the path of --web.external-url with a slash at the end.
	Prefix        string
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
	// Providers are those the filter selects, in the status's order (status.Build). Every
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

// landingProvider is one provider's row and the targets listed under it.
type landingProvider struct {
	Name    string
	Type    checks.ProviderType
	Checked bool
	Ready   int
	Total   int
	// DownTotal counts the down targets, listed or not.
	DownTotal int
	// WorstReason is the reason most down targets share (status.WorstReason); WorstCount
	// counts them and OtherReasons the other reasons among the down targets.
	WorstReason  checks.Reason
	WorstCount   int
	OtherReasons int
	// Since is the ProviderHealth Ready condition's transition time (status.Provider's
	// VerdictSince).
	Since    string
	SinceFor string
	// LastChecked is the newest check of its targets.
	LastChecked    string
	LastCheckedAgo string
	// RecentReady is the share of its recent checks that read Ready.
	RecentReady string
	// Down are the down targets on this page, listed; Up the ready ones, folded when FoldUp.
	Down   []landingRow
	Up     []landingRow
	FoldUp bool
	// Hidden says which targets the filter leaves out; Elsewhere, which of the selected ones
	// are on other pages.
	Hidden    string
	Elsewhere string
	// Unchecked counts its targets without a verdict yet; UncheckedNote names the first
	// landingUncheckedNames of them and why they have no verdict.
	Unchecked     int
	UncheckedNote string
	// Maintenance counts its targets in maintenance (deliberately out of service: neither
	// ready nor down, listed apart); MaintenanceNote names the first landingUncheckedNames.
	Maintenance     int
	MaintenanceNote string
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
	// Strip is its recent checks, oldest first, one cell each; StripTitle sums them up.
	Strip      template.HTML
	StripTitle string
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
	f, err := status.ParseFilterQuery(r.URL.RawQuery)
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

// statusOf is the status model of snapshot s under filter f.
func (e *Exporter) statusOf(s *checks.Snapshot, f status.Filter) *status.Status {
	src := status.Source{Version: version.Version, Interval: e.interval, Timeout: e.timeout}
	if e.CRDReport != nil {
		r := e.CRDReport()
		src.Writer = &r
	}
	for _, p := range e.inventory.problems() {
		src.HostFileProblems = append(src.HostFileProblems, status.HostFileProblem{Provider: p.Provider, File: p.Path,
			Error: strings.Join(p.lines(), "\n"), Since: p.Since.UTC(), HostsKept: p.Kept})
	}
	return status.Build(s, f, src)
}

// landingData is the page's view of the status of snapshot s under filter f.
func (e *Exporter) landingData(s *checks.Snapshot, f landingFilter, now time.Time) landingData {
	st := e.statusOf(s, f)
	f = st.Filter
	d := landingData{
		Prefix:        e.linkPrefix,
		Version:       st.Version,
		ChecksOn:      st.ChecksEnabled,
		Interval:      status.Seconds(st.Interval),
		Timeout:       status.Seconds(st.Timeout),
		Abandoned:     st.AbandonedTotal,
		AllProviders:  st.AllProviders,
		Filter:        f,
		Now:           formatTime(now),
		HistoryLength: checks.HistoryLength,
		RecentLength:  checks.RecentLength,
	}
	if r := st.Round; r != nil {
		d.Round, d.RoundDuration = r.Number, roundDuration(status.Seconds(r.Duration))
		d.RoundStarted, d.RoundAgo = formatTime(r.Started), humanDuration(now.Sub(r.Started))
	}
	if st.Writer != nil {
		d.Writer = landingWriterOf(st.Writer, now)
	}
	for _, p := range st.HostFileProblems {
		d.HostFileProblems = append(d.HostFileProblems, landingHostFileProblem{Provider: p.Provider, Path: p.File,
			Err: p.Error, Since: formatTime(p.Since), SinceFor: humanDuration(now.Sub(p.Since)), Kept: p.HostsKept})
	}
	for i := range st.Providers {
		d.Providers = append(d.Providers, landingProviderOf(&st.Providers[i], f, now))
	}
	d.Pager = landingPagerOf(st.Page, f)
	d.LabelInputs = labelInputs(f.Labels)
	// Under an external path, every link of the page starts with it.
	if e.linkPrefix != "" {
		for i := range d.Providers {
			for _, rows := range [][]landingRow{d.Providers[i].Down, d.Providers[i].Up} {
				for j := range rows {
					rows[j].ProbeURL = e.link(rows[j].ProbeURL)
				}
			}
		}
		if d.Pager.Prev != "" {
			d.Pager.Prev = e.link(d.Pager.Prev)
		}
		if d.Pager.Next != "" {
			d.Pager.Next = e.link(d.Pager.Next)
		}
	}
	sm := st.Summary
	d.Summary = landingSummary(sm.Providers, sm.DownProviders, sm.UncheckedProviders, sm.Targets, sm.Ready, sm.Maintenance, sm.Unchecked)
	switch {
	case f.Provider != "" && !slices.Contains(d.AllProviders, f.Provider):
		d.NoMatch = fmt.Sprintf("No provider is named %q.", f.Provider)
	case f.Reason != "" && len(f.Labels) > 0:
		d.NoMatch = fmt.Sprintf("No target reads %s with the labels %s.", f.Reason, f.LabelList())
	case f.Reason != "":
		d.NoMatch = fmt.Sprintf("No target reads %s.", f.Reason)
	case len(f.Labels) > 0:
		d.NoMatch = fmt.Sprintf("No target has the labels %s.", f.LabelList())
	case f.State == "down":
		d.NoMatch = "No target is down."
	case f.State == "up":
		d.NoMatch = "No target is ready."
	}
	return d
}

// landingPagerOf numbers the rows of page pg and links its neighbours.
func landingPagerOf(pg status.Page, f landingFilter) landingPager {
	p := landingPager{Page: pg.Number, Pages: pg.Pages, Total: pg.Total}
	if lo := (pg.Number - 1) * pg.Size; lo < pg.Total {
		p.First, p.Last = lo+1, min(lo+pg.Size, pg.Total)
	}
	if pg.Number > 1 {
		p.Prev = f.URL(min(pg.Number-1, pg.Pages))
	}
	if pg.Number < pg.Pages {
		p.Next = f.URL(pg.Number + 1)
	}
	return p
}

// landingWriterOf describes the writer's state w for the page.
func landingWriterOf(w *status.Writer, now time.Time) *landingWriter {
	lw := &landingWriter{}
	switch {
	case !w.Writing:
		lw.State = "This replica does not write the ProviderHealth objects now: another replica holds the Lease (--crd.leader-elect), or the writer has not started writing yet."
	case len(w.Problems) == 0:
		lw.State = fmt.Sprintf("This replica writes the ProviderHealth objects; every provider's object is written (round %d synced).", w.SyncedRound)
	default:
		lw.State = fmt.Sprintf("This replica writes the ProviderHealth objects; %d cannot be written now (the others are written as usual; round %d synced):", len(w.Problems), w.SyncedRound)
	}
	for _, p := range w.Problems {
		lp := landingObjectProblem{Provider: p.Provider, Problem: p.Problem, Since: formatTime(p.Since), SinceFor: humanDuration(now.Sub(p.Since)), Err: p.Error}
		switch p.Problem {
		case crdwriter.ProblemFailing:
			var retryAt time.Time
			if p.RetryAt != nil {
				retryAt = *p.RetryAt
			}
			lp.Retry = fmt.Sprintf("%d failed write%s; next attempt in %s", p.Attempts, plural(p.Attempts), humanDuration(retryAt.Sub(now)))
		case crdwriter.ProblemRejected:
			lp.Retry = "when its status changes, or after the heartbeat interval"
		case crdwriter.ProblemNameClash:
			lp.Retry = "never written: the object of this name is not this deployment's (see the writer's log)"
		}
		lw.Problems = append(lw.Problems, lp)
	}
	return lw
}

// landingProviderOf is one provider's row and the rows of its targets on the page.
func landingProviderOf(sp *status.Provider, f landingFilter, now time.Time) landingProvider {
	p := landingProvider{Name: sp.Name, Type: checks.ProviderType(sp.Type), Checked: sp.Checked, Ready: sp.Ready, Total: sp.Total,
		DownTotal: sp.Down, FoldUp: !f.Narrows(), Unchecked: sp.Unchecked, Maintenance: sp.Maintenance}
	p.UncheckedNote = uncheckedNote(sp, now)
	if !p.Checked {
		return p
	}
	for i := range sp.Targets {
		if r := landingRowOf(sp, &sp.Targets[i], now); r.Up {
			p.Up = append(p.Up, r)
		} else {
			p.Down = append(p.Down, r)
		}
	}
	if p.Maintenance > 0 {
		names := make([]string, len(sp.InMaintenance))
		for i, m := range sp.InMaintenance {
			names[i] = fmt.Sprintf("%s (since %s)", m.Name, formatTime(m.Since))
		}
		list := strings.Join(names, ", ")
		if more := p.Maintenance - len(names); more > 0 {
			list += fmt.Sprintf(" and %d more", more)
		}
		p.MaintenanceNote = fmt.Sprintf("%d target%s in maintenance, counted neither ready nor down: %s.", p.Maintenance, plural(p.Maintenance), list)
	}
	if p.DownTotal > 0 {
		p.WorstReason, p.WorstCount, p.OtherReasons = checks.Reason(sp.WorstReason), sp.WorstCount, sp.OtherReasons
	}
	p.Since, p.SinceFor = formatTime(sp.VerdictSince), humanDuration(now.Sub(sp.VerdictSince))
	p.LastChecked, p.LastCheckedAgo = formatTime(*sp.LastChecked), humanDuration(now.Sub(*sp.LastChecked))
	if sp.RecentChecks > 0 {
		p.RecentReady = fmt.Sprintf("%s ready (%d of %d)", percent(sp.RecentReady, sp.RecentChecks), sp.RecentReady, sp.RecentChecks)
	}
	switch hidden := p.Total - p.Maintenance - sp.Selected; {
	case hidden == 0:
	case f.Reason != "" || len(f.Labels) > 0:
		p.Hidden = fmt.Sprintf("%d target%s of other reasons, labels or states not shown (filter: %s).", hidden, plural(hidden), f.Describe())
	case f.State == "down":
		p.Hidden = fmt.Sprintf("%d ready target%s not shown (state filter: down only).", hidden, plural(hidden))
	case f.State == "up":
		p.Hidden = fmt.Sprintf("%d down target%s not shown (state filter: ready only).", hidden, plural(hidden))
	}
	switch shown := len(sp.Targets); {
	case shown == sp.Selected:
	case shown == 0 && sp.Selected == 1:
		p.Elsewhere = "Its target is on another page."
	case shown == 0:
		p.Elsewhere = fmt.Sprintf("Its %d targets are on other pages.", sp.Selected)
	default:
		p.Elsewhere = fmt.Sprintf("%d of its %d targets are on this page, the others on other pages.", shown, sp.Selected)
	}
	return p
}

// uncheckedNote says which of a provider's targets have no verdict yet, since when, and why
// (the first one's note: "not started: ..." or its first checks' count).
func uncheckedNote(sp *status.Provider, now time.Time) string {
	us := sp.UncheckedTargets
	if len(us) == 0 {
		return ""
	}
	names := make([]string, len(us))
	for i := range us {
		names[i] = us[i].Name
	}
	list := strings.Join(names, ", ")
	if more := sp.Unchecked - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	note := fmt.Sprintf("%d target%s not checked yet, counted neither up nor down (listed %s, %s ago): %s.",
		sp.Unchecked, plural(sp.Unchecked), formatTime(sp.UncheckedListed), humanDuration(now.Sub(sp.UncheckedListed)), list)
	if us[0].Message != "" {
		note += fmt.Sprintf(" %s: %s", us[0].Name, us[0].Message)
	}
	return note
}

func landingRowOf(sp *status.Provider, t *status.Target, now time.Time) landingRow {
	r := landingRow{
		Target:   t.Name,
		Labels:   labelString(t.Labels),
		ProbeURL: probeURL(sp.Name, t.Name),
		Up:       t.Up,
		Reason:   checks.Reason(t.Reason),
		// The catalogue marks names with backticks, as Markdown does; a title shows them bare.
		Meaning:    strings.ReplaceAll(t.Meaning, "`", ""),
		Message:    t.Message,
		Since:      formatTime(t.Since),
		SinceFor:   humanDuration(now.Sub(t.Since)),
		CheckedAt:  formatTime(t.LastContacted),
		CheckedAgo: humanDuration(now.Sub(t.LastContacted)),
		Duration:   roundDuration(status.Seconds(t.CheckDuration)),
		Pending:    t.Pending,
		History:    landingHistory(t.History),
	}
	r.Strip, r.StripTitle = landingStrip(t.Recent)
	return r
}

// landingHistory lists h (oldest first) newest first.
func landingHistory(h []status.Transition) []landingTransition {
	out := make([]landingTransition, 0, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		tr := &h[i]
		lt := landingTransition{When: formatTime(tr.At), From: "none (first check)", To: verdictWord(tr.Up),
			ToClass: verdictWord(tr.Up), Reason: checks.Reason(tr.Reason), Message: tr.Message}
		if !tr.First {
			lt.From = verdictWord(tr.FromUp)
			if !tr.FromUp {
				lt.From += " (" + tr.FromReason + ")"
			}
		}
		out = append(out, lt)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// SetExternalPath makes the status page's links absolute under path, the path of
// --web.external-url (as Prometheus's pages follow it), for an exporter reached through a
// proxy that routes by path. Empty or "/": relative links, for an exporter served at the root.
// Call it before serving.
func (e *Exporter) SetExternalPath(path string) {
	path = strings.TrimSuffix(path, "/")
	if path == "" {
		e.linkPrefix = ""
		return
	}
	e.linkPrefix = path + "/"
}

// link is a link of the status page, relative to the page (as status.Filter.URL and probeURL
// give it), under the external path when there is one.
func (e *Exporter) link(rel string) string {
	if e.linkPrefix == "" {
		return rel
	}
	return e.linkPrefix + strings.TrimPrefix(rel, "./")
}

// labelInputs renders the filter's labels as hidden inputs of the form, so that the next
// filter keeps them: each value escaped for a double-quoted attribute (html.EscapeString
// escapes &, <, >, " and ').
func labelInputs(ls []status.LabelMatch) template.HTML {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(`<input type="hidden" name="label" value="`)
		b.WriteString(html.EscapeString(l.String()))
		b.WriteString(`">`)
	}
	return template.HTML(b.String()) //nolint:gosec // every value escaped above
}
