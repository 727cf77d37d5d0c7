// Package status is the model of the exporter's status: what GET /api/v1/status answers (its
// JSON encoding, docs/api.md) and what the status page renders, built from one snapshot under
// one filter. The model knows no page: the page is a view of it, so a change of the page's
// layout cannot change the API.
//
// The JSON field names are a stable interface: a change that removes or renames one needs a new
// version of the path. Fields tagged json:"-" are the model's too, for the page's notes, and are
// not part of the API.
package status

import (
	"math"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// PageRows bounds the target rows of one page, listed or folded, so that a page's size and the
// memory a render takes stay the same whatever the fleet's size. The rows run in the page's
// order, down targets first; the pages reach every target, and the filters narrow them.
const PageRows = 250

// NamesLimit bounds the names of a provider's unchecked targets and of its targets in
// maintenance that a status lists: after a start of a large fleet they can be thousands, and
// they have nothing to show but a name.
const NamesLimit = 20

// Status is the exporter's status: the last round, the providers and targets the filter
// selects on one page, the ProviderHealth writer's state and the host files that do not read
// well.
type Status struct {
	Version       string  `json:"version"`
	ChecksEnabled bool    `json:"checksEnabled"`
	Interval      float64 `json:"intervalSeconds"`
	Timeout       float64 `json:"timeoutSeconds"`
	// Round is the last completed round; null before the first.
	Round     *Round     `json:"round"`
	Summary   Summary    `json:"summary"`
	Providers []Provider `json:"providers"`
	Page      Page       `json:"page"`
	// Writer is the ProviderHealth writer's state; null without --crd.enabled.
	Writer *Writer `json:"writer"`
	// HostFileProblems are the host files (hostFiles) that do not read well now; empty when
	// every one does.
	HostFileProblems []HostFileProblem `json:"hostFileProblems"`

	// Filter is the query the status answers.
	Filter Filter `json:"-"`
	// AllProviders names every configured provider, whatever the filter.
	AllProviders []string `json:"-"`
	// AbandonedTotal counts the checkers abandoned at a round's deadline so far.
	AbandonedTotal uint64 `json:"-"`
}

// HostFileProblem is a host file that does not read well: its provider keeps the HostsKept
// hosts of its last good read.
type HostFileProblem struct {
	Provider  string    `json:"provider"`
	File      string    `json:"file"`
	Error     string    `json:"error"`
	Since     time.Time `json:"since"`
	HostsKept int       `json:"hostsKept"`
}

// Round is one completed round of checks.
type Round struct {
	Number   uint64    `json:"number"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"durationSeconds"`
}

// Summary counts over the whole snapshot, whatever the filter.
type Summary struct {
	Providers int `json:"providers"`
	Targets   int `json:"targets"`
	Ready     int `json:"ready"`
	// Down counts the targets with a verdict that are not ready, those in maintenance included.
	Down      int `json:"down"`
	Unchecked int `json:"unchecked"`

	// Maintenance counts the targets in maintenance; DownProviders the checked providers with
	// a target down (out of maintenance), UncheckedProviders those not checked yet.
	Maintenance        int `json:"-"`
	DownProviders      int `json:"-"`
	UncheckedProviders int `json:"-"`
}

// Provider is one provider the filter selects, and its targets on the page.
type Provider struct {
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
	Targets []Target `json:"targets"`
	// UncheckedTargets are the first NamesLimit of its targets without a verdict.
	UncheckedTargets []Unchecked `json:"uncheckedTargets"`
	// Maintenance counts its targets in maintenance (neither ready nor down);
	// MaintenanceTargets are the first NamesLimit of them the filter selects (none under a
	// state filter: they are neither), on every page.
	Maintenance        int      `json:"maintenance"`
	MaintenanceTargets []Target `json:"maintenanceTargets"`
	// RecentReadyRatio is the share of its targets' recent checks (the last
	// checks.RecentLength of each, the rounds that did not contact a target and maintenance
	// left out) that read Ready; null when there are none.
	RecentReadyRatio *float64 `json:"recentReadyRatio"`

	// WorstCount counts the down targets of the worst reason, OtherReasons the other reasons
	// among the down targets (maintenance left out).
	WorstCount   int `json:"-"`
	OtherReasons int `json:"-"`
	// VerdictSince is when its verdict last changed with the targets in maintenance left out:
	// while a target is down, the earliest Since of the down ones; else the latest Since.
	VerdictSince time.Time `json:"-"`
	// RecentReady and RecentChecks are RecentReadyRatio's numerator and denominator.
	RecentReady, RecentChecks int `json:"-"`
	// Selected counts its target rows the filter selects, on every page.
	Selected int `json:"-"`
	// UncheckedListed is when the longest-waiting of its unchecked targets was listed.
	UncheckedListed time.Time `json:"-"`
	// InMaintenance are the first NamesLimit of its targets in maintenance, whatever the filter.
	InMaintenance []TargetSince `json:"-"`
}

// TargetSince is a target's name and since when its verdict holds.
type TargetSince struct {
	Name  string
	Since time.Time
}

// Target is one target's verdict.
type Target struct {
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
	History []Transition `json:"history"`

	// Recent is its last checks, oldest first, as the checks read them (before the
	// thresholds).
	Recent []checks.RecentCheck `json:"-"`
}

// Transition is one change of a target's verdict.
type Transition struct {
	At time.Time `json:"at"`
	// First marks the target's first verdict (FromUp and FromReason are then empty).
	First      bool   `json:"first"`
	FromUp     bool   `json:"fromUp"`
	FromReason string `json:"fromReason"`
	Up         bool   `json:"up"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
}

// Unchecked is a target without a verdict yet.
type Unchecked struct {
	Name    string    `json:"name"`
	Listed  time.Time `json:"listed"`
	Message string    `json:"message"`
}

// Page says which of the selected target rows the status holds.
type Page struct {
	Number int `json:"number"`
	Pages  int `json:"pages"`
	Size   int `json:"size"`
	// Total counts the target rows the filter selects, on every page.
	Total int `json:"total"`
}

// Writer is the ProviderHealth writer's state.
type Writer struct {
	Writing     bool            `json:"writing"`
	SyncedRound uint64          `json:"syncedRound"`
	Problems    []ObjectProblem `json:"problems"`
}

// ObjectProblem is an object the writer cannot write now.
type ObjectProblem struct {
	Provider string     `json:"provider"`
	Problem  string     `json:"problem"`
	Error    string     `json:"error"`
	Since    time.Time  `json:"since"`
	Attempts int        `json:"attempts"`
	RetryAt  *time.Time `json:"retryAt"`
}

// Seconds is the duration of a model's seconds field.
func Seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
