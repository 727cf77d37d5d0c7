package exporter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
)

// GET /api/v1/status answers what the status page shows, as JSON (docs/api.md): the same
// filters (provider, state, reason, label), the same order and the same pages of at most
// landingPageRows targets, in Prometheus's HTTP API envelope ({"status": "success", "data":
// ...}, or "error" with errorType and error). The field names are a stable interface:
// api_test.go pins them; a change that removes or renames one needs a new version of the path.

type apiResponse struct {
	Status    string     `json:"status"`
	Data      *apiStatus `json:"data,omitempty"`
	ErrorType string     `json:"errorType,omitempty"`
	Error     string     `json:"error,omitempty"`
}

type apiStatus struct {
	Version       string  `json:"version"`
	ChecksEnabled bool    `json:"checksEnabled"`
	Interval      float64 `json:"intervalSeconds"`
	Timeout       float64 `json:"timeoutSeconds"`
	// Round is the last completed round; null before the first.
	Round     *apiRound     `json:"round"`
	Summary   apiSummary    `json:"summary"`
	Providers []apiProvider `json:"providers"`
	Page      apiPage       `json:"page"`
	// Writer is the ProviderHealth writer's state; null without --crd.enabled.
	Writer *apiWriter `json:"writer"`
	// HostFileProblems are the host files (hostFiles) that do not read well now; empty when
	// every one does.
	HostFileProblems []apiHostFileProblem `json:"hostFileProblems"`
}

// apiHostFileProblem is a host file that does not read well: its provider keeps the
// HostsKept hosts of its last good read.
type apiHostFileProblem struct {
	Provider  string    `json:"provider"`
	File      string    `json:"file"`
	Error     string    `json:"error"`
	Since     time.Time `json:"since"`
	HostsKept int       `json:"hostsKept"`
}

type apiRound struct {
	Number   uint64    `json:"number"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"durationSeconds"`
}

// apiSummary counts over the whole snapshot, whatever the filter.
type apiSummary struct {
	Providers int `json:"providers"`
	Targets   int `json:"targets"`
	Ready     int `json:"ready"`
	Down      int `json:"down"`
	Unchecked int `json:"unchecked"`
}

type apiProvider struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Checked bool   `json:"checked"`
	// Ready, Down and Total count its targets with a verdict; Unchecked those without one.
	Ready     int `json:"ready"`
	Down      int `json:"down"`
	Total     int `json:"total"`
	Unchecked int `json:"unchecked"`
	// WorstReason is the reason most of its down targets share ("" when none is down).
	WorstReason string `json:"worstReason"`
	// Since is when it last turned down or ready, as in its ProviderHealth object; LastChecked
	// its newest check. Both null while it is not checked.
	Since       *time.Time `json:"since"`
	LastChecked *time.Time `json:"lastChecked"`
	// Targets are its targets on this page: the down ones first, then the ready ones.
	Targets []apiTarget `json:"targets"`
	// UncheckedTargets are the first landingUncheckedNames of its targets without a verdict.
	UncheckedTargets []apiUnchecked `json:"uncheckedTargets"`
	// Maintenance counts its targets in maintenance (neither ready nor down);
	// MaintenanceTargets are the first landingUncheckedNames of them the filter selects (none
	// under a state filter: they are neither), on every page.
	Maintenance        int         `json:"maintenance"`
	MaintenanceTargets []apiTarget `json:"maintenanceTargets"`
	// RecentReadyRatio is the share of its targets' recent checks (the status page's strips:
	// the last checks.RecentLength of each, the rounds that did not contact a target and
	// maintenance left out) that read Ready; null when there are none.
	RecentReadyRatio *float64 `json:"recentReadyRatio"`
}

type apiTarget struct {
	Name    string `json:"name"`
	Up      bool   `json:"up"`
	Reason  string `json:"reason"`
	Meaning string `json:"meaning"`
	Message string `json:"message"`
	// Labels are the target's labels: its provider's, with its own over them ({} when none).
	Labels map[string]string `json:"labels"`
	// Since is when the verdict last changed; LastContacted when the last check that
	// contacted the target completed, and CheckDuration how long it took.
	Since         time.Time `json:"since"`
	LastContacted time.Time `json:"lastContacted"`
	CheckDuration float64   `json:"checkDurationSeconds"`
	// Pending says that a threshold holds the verdict ("" when none does), CheckReason what
	// the last check itself read.
	Pending              string `json:"pending"`
	CheckReason          string `json:"checkReason"`
	ConsecutiveFailures  int    `json:"consecutiveFailures"`
	ConsecutiveSuccesses int    `json:"consecutiveSuccesses"`
	// History is its last transitions, oldest first.
	History []apiTransition `json:"history"`
}

type apiTransition struct {
	At time.Time `json:"at"`
	// First marks the target's first verdict (FromUp and FromReason are then empty).
	First      bool   `json:"first"`
	FromUp     bool   `json:"fromUp"`
	FromReason string `json:"fromReason"`
	Up         bool   `json:"up"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
}

type apiUnchecked struct {
	Name    string    `json:"name"`
	Listed  time.Time `json:"listed"`
	Message string    `json:"message"`
}

type apiPage struct {
	Number int `json:"number"`
	Pages  int `json:"pages"`
	Size   int `json:"size"`
	// Total counts the target rows the filter selects, on every page.
	Total int `json:"total"`
}

type apiWriter struct {
	Writing     bool               `json:"writing"`
	SyncedRound uint64             `json:"syncedRound"`
	Problems    []apiObjectProblem `json:"problems"`
}

type apiObjectProblem struct {
	Provider string     `json:"provider"`
	Problem  string     `json:"problem"`
	Error    string     `json:"error"`
	Since    time.Time  `json:"since"`
	Attempts int        `json:"attempts"`
	RetryAt  *time.Time `json:"retryAt"`
}

// serveStatusAPI answers GET /api/v1/status, sharing the status page's bound on renders in
// flight.
func (e *Exporter) serveStatusAPI(w http.ResponseWriter, r *http.Request) {
	select {
	case e.landingSlots <- struct{}{}:
		defer func() { <-e.landingSlots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeAPI(w, http.StatusServiceUnavailable, apiResponse{Status: "error", ErrorType: "unavailable",
			Error: fmt.Sprintf("too many renders of the status in flight (at most %d): retry in a moment", cap(e.landingSlots))})
		return
	}
	e.renderStatusAPI(w, r, e.runner.Current(), time.Now())
}

// renderStatusAPI answers the status of snapshot s, filtered by r's query.
func (e *Exporter) renderStatusAPI(w http.ResponseWriter, r *http.Request, s *checks.Snapshot, now time.Time) {
	f, err := parseLandingFilter(r.URL.Query())
	if err != nil {
		writeAPI(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
		return
	}
	writeAPI(w, http.StatusOK, apiResponse{Status: "success", Data: e.apiStatusOf(s, f, now)})
}

func writeAPI(w http.ResponseWriter, code int, resp apiResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(resp)
}

// apiStatusOf is the status page's model of snapshot s under filter f, for JSON.
func (e *Exporter) apiStatusOf(s *checks.Snapshot, f landingFilter, now time.Time) *apiStatus {
	d := e.landingData(s, f, now)
	out := &apiStatus{
		Version:       d.Version,
		ChecksEnabled: d.ChecksOn,
		Interval:      e.interval.Seconds(),
		Timeout:       e.timeout.Seconds(),
		Summary:       apiSummary{Providers: len(s.Providers)},
		Providers:     []apiProvider{},
		Page:          apiPage{Number: d.Pager.Page, Pages: d.Pager.Pages, Size: landingPageRows, Total: d.Pager.Total},
	}
	if s.Round > 0 {
		out.Round = &apiRound{Number: s.Round, Started: s.RoundStarted.UTC(), Duration: s.RoundDuration.Seconds()}
	}
	for i := range s.Providers {
		ps := &s.Providers[i]
		out.Summary.Targets += len(ps.Targets)
		out.Summary.Unchecked += len(ps.Unchecked)
		for j := range ps.Targets {
			if ps.Targets[j].Up {
				out.Summary.Ready++
			} else {
				out.Summary.Down++
			}
		}
	}
	for i := range d.Providers {
		out.Providers = append(out.Providers, apiProviderOf(&d.Providers[i]))
	}
	if e.CRDReport != nil {
		out.Writer = apiWriterOf(e.CRDReport())
	}
	out.HostFileProblems = []apiHostFileProblem{}
	for _, p := range e.inventory.problems() {
		out.HostFileProblems = append(out.HostFileProblems, apiHostFileProblem{Provider: p.Provider, File: p.Path,
			Error: strings.Join(p.lines(), "\n"), Since: p.Since.UTC(), HostsKept: p.Kept})
	}
	return out
}

func apiProviderOf(p *landingProvider) apiProvider {
	ap := apiProvider{Name: p.Name, Type: string(p.Type), Checked: p.Checked, Ready: p.Ready, Down: p.DownTotal, Total: p.Total,
		Unchecked: p.Unchecked, WorstReason: string(p.WorstReason), Targets: []apiTarget{}, UncheckedTargets: []apiUnchecked{},
		Maintenance: p.Maintenance, MaintenanceTargets: []apiTarget{}}
	if ready, all := recentCounts(p.ps); all > 0 {
		r := float64(ready) / float64(all)
		ap.RecentReadyRatio = &r
	}
	var lastChecked, lastFlip, firstDown time.Time
	for i := range p.ps.Targets {
		t := &p.ps.Targets[i]
		if t.CheckedAt.After(lastChecked) {
			lastChecked = t.CheckedAt
		}
		if t.Since.After(lastFlip) {
			lastFlip = t.Since
		}
		if !t.Up && (firstDown.IsZero() || t.Since.Before(firstDown)) {
			firstDown = t.Since
		}
	}
	if p.Checked {
		since := lastFlip
		if p.DownTotal > 0 {
			since = firstDown
		}
		since, lastChecked = since.UTC(), lastChecked.UTC()
		ap.Since, ap.LastChecked = &since, &lastChecked
	}
	for _, rows := range [][]landingRow{p.Down, p.Up} {
		for i := range rows {
			ap.Targets = append(ap.Targets, apiTargetOf(p.ps, rows[i].ts))
		}
	}
	for i := range p.ps.Targets {
		if t := &p.ps.Targets[i]; inMaintenance(t) && p.filter.State == "" && p.filter.matches(p.ps, t) && len(ap.MaintenanceTargets) < landingUncheckedNames {
			ap.MaintenanceTargets = append(ap.MaintenanceTargets, apiTargetOf(p.ps, t))
		}
	}
	for i := range p.ps.Unchecked[:min(len(p.ps.Unchecked), landingUncheckedNames)] {
		u := &p.ps.Unchecked[i]
		ap.UncheckedTargets = append(ap.UncheckedTargets, apiUnchecked{Name: u.Target, Listed: u.Listed.UTC(), Message: u.Message})
	}
	return ap
}

func apiTargetOf(ps *checks.ProviderState, t *checks.TargetState) apiTarget {
	labels := ps.Labels.Of(t.Target)
	if labels == nil {
		labels = map[string]string{}
	}
	at := apiTarget{
		Name: t.Target, Up: t.Up, Reason: string(t.Reason), Meaning: checks.Meaning(ps.Type, t.Reason), Message: t.Message,
		Labels: labels,
		Since:  t.Since.UTC(), LastContacted: t.CheckedAt.UTC(), CheckDuration: t.Duration.Seconds(),
		Pending: pendingNote(t), CheckReason: string(t.CheckReason),
		ConsecutiveFailures: t.ConsecutiveFailures, ConsecutiveSuccesses: t.ConsecutiveSuccesses,
		History: []apiTransition{},
	}
	h := t.History
	if len(h) == 1 && h[0].First {
		h = nil // unchanged since its first verdict, as on the page
	}
	for _, tr := range h[max(0, len(h)-checks.HistoryLength):] {
		at.History = append(at.History, apiTransition{At: tr.At.UTC(), First: tr.First, FromUp: tr.FromUp, FromReason: string(tr.FromReason),
			Up: tr.Up, Reason: string(tr.Reason), Message: tr.Message})
	}
	return at
}

func apiWriterOf(r crdwriter.Report) *apiWriter {
	w := &apiWriter{Writing: r.Writing, SyncedRound: r.SyncedRound, Problems: []apiObjectProblem{}}
	for _, p := range r.Problems {
		ap := apiObjectProblem{Provider: p.Provider, Problem: p.Problem, Error: p.Err, Since: p.Since.UTC(), Attempts: p.Attempts}
		if !p.RetryAt.IsZero() {
			at := p.RetryAt.UTC()
			ap.RetryAt = &at
		}
		w.Problems = append(w.Problems, ap)
	}
	return w
}
