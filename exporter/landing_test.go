package exporter

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	"github.com/provider-health-exporter/provider-health-exporter/exporter/status"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// fleet is a snapshot of 1,000 targets, shaped like a large installation: a KVM provider of 600
// hosts with 27 down for three reasons, a healthy one of 398, a GCP project down, a healthy
// cluster, and a provider just added by a reload and not checked yet.
type fleet struct {
	snap *checks.Snapshot
	now  time.Time
	// down lists the down targets' names; upEast a few ready kvm-east hosts.
	down   []string
	upEast []string
}

func newFleet() fleet {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := fleet{now: now}
	checked := now.Add(-20 * time.Second)
	ready := func(name string, since time.Time) checks.TargetState {
		return checks.TargetState{TargetResult: checks.TargetResult{Target: name, Up: true, Reason: checks.ReasonReady,
			Message: "pool default running", Duration: 3 * time.Millisecond, CheckedAt: checked}, Since: since}
	}
	downT := func(name string, r checks.Reason, msg string, since time.Time) checks.TargetState {
		f.down = append(f.down, name)
		return checks.TargetState{TargetResult: checks.TargetResult{Target: name, Reason: r, Message: msg,
			Duration: 2 * time.Second, CheckedAt: checked}, Since: since}
	}
	var east, west []checks.TargetState
	for i := range 600 {
		name := fmt.Sprintf("hv-east-%03d", i)
		switch {
		case i == 577: // down longest: the provider's since
			ts := downT(name, kvm.ReasonTCPUnreachable, "dial tcp 198.18.2.65:22: connect: connection refused", now.Add(-3*time.Hour))
			ts.History = []checks.Transition{{At: now.Add(-50 * time.Hour), First: true, Up: true, Reason: checks.ReasonReady},
				{At: now.Add(-3 * time.Hour), FromUp: true, FromReason: checks.ReasonReady, Reason: kvm.ReasonTCPUnreachable, Message: "history-message-577"}}
			east = append(east, ts)
		case i%30 == 7:
			east = append(east, downT(name, kvm.ReasonTCPUnreachable, fmt.Sprintf("dial tcp 198.18.%d.%d:22: i/o timeout", i/250, i%250), now.Add(-10*time.Minute)))
		case i%120 == 11:
			east = append(east, downT(name, kvm.ReasonSSHAuthFailed, "ssh: unable to authenticate, attempted methods [none publickey]", now.Add(-40*time.Minute)))
		case i == 200 || i == 201:
			east = append(east, downT(name, kvm.ReasonPoolInactive, "storage pool default is inactive <b>boom</b>", now.Add(-15*time.Minute)))
		default:
			if len(f.upEast) < 3 {
				f.upEast = append(f.upEast, name)
			}
			east = append(east, ready(name, now.Add(-48*time.Hour)))
		}
	}
	for i := range 398 {
		since := now.Add(-72 * time.Hour)
		if i == 250 {
			since = now.Add(-5 * time.Minute) // came back last: the provider's since
		}
		west = append(west, ready(fmt.Sprintf("hv-west-%03d", i), since))
	}
	west[10].CheckedAt = now.Add(-3 * time.Second) // the provider's last check
	f.snap = &checks.Snapshot{
		Round: 42, RoundStarted: now.Add(-25 * time.Second), RoundDuration: 2100 * time.Millisecond,
		Providers: []checks.ProviderState{
			{Name: "cluster-main", Type: "kubernetes", Targets: []checks.TargetState{ready("cluster-main", now.Add(-24*time.Hour))}},
			{Name: "kvm-east", Type: "kvm", Targets: east},
			{Name: "gcp-prod", Type: "gcp", Targets: []checks.TargetState{
				downT("my-project-123456", checks.ReasonForbidden, "permission compute.instances.list denied", now.Add(-2*time.Minute))}},
			{Name: "kvm-west", Type: "kvm", Targets: west},
			{Name: "kvm-new", Type: "kvm"},
		},
	}
	return f
}

func landingExporter() *Exporter {
	return &Exporter{logger: slog.New(slog.DiscardHandler), interval: time.Minute, timeout: 15 * time.Second}
}

// TestLandingData: the page's model of the fleet: providers with down targets first, then the
// one not checked yet, then the healthy ones; ready/total, the worst reason, the provider's
// since (first down / last back) and last check; down targets listed, ready ones folded; the
// filters by provider and state.
func TestLandingData(t *testing.T) {
	f := newFleet()
	e := landingExporter()
	d := e.landingData(f.snap, landingFilter{}, f.now)
	var order []string
	for _, p := range d.Providers {
		order = append(order, p.Name)
	}
	if got, want := strings.Join(order, " "), "kvm-east gcp-prod kvm-new cluster-main kvm-west"; got != want {
		t.Errorf("provider order %q, want %q", got, want)
	}
	if want := "5 providers, 972 of 1000 targets ready; 28 targets down in 2 providers; 1 provider not checked yet."; d.Summary != want {
		t.Errorf("summary %q, want %q", d.Summary, want)
	}
	east := d.Providers[0]
	// Page 1 holds 250 rows: the 28 down targets of every provider first, then 222 of
	// kvm-east's ready ones.
	if east.Ready != 573 || east.Total != 600 || east.DownTotal != 27 || len(east.Down) != 27 || len(east.Up) != 222 || !east.FoldUp {
		t.Errorf("kvm-east: %d/%d ready, %d down (%d listed), %d up (folded %v)", east.Ready, east.Total, east.DownTotal, len(east.Down), len(east.Up), east.FoldUp)
	}
	if east.WorstReason != kvm.ReasonTCPUnreachable || east.WorstCount != 20 || east.OtherReasons != 2 {
		t.Errorf("kvm-east worst reason %s ×%d and %d others, want TCPUnreachable ×20 and 2 others", east.WorstReason, east.WorstCount, east.OtherReasons)
	}
	// Each row's reason carries its meaning from the type's catalogue, for the cell's title.
	for _, r := range append(east.Down[:1], east.Up[:1]...) {
		if want := strings.ReplaceAll(checks.Meaning(kvm.Type, r.Reason), "`", ""); want == "" || r.Meaning != want {
			t.Errorf("kvm-east %s: meaning %q, want the catalogue's %q", r.Target, r.Meaning, want)
		}
	}
	if want := formatTime(f.now.Add(-3 * time.Hour)); east.Since != want || east.SinceFor != "3h" {
		t.Errorf("kvm-east since %s (for %s), want the earliest down target's, %s (3h)", east.Since, east.SinceFor, want)
	}
	west := d.Providers[4]
	if want := formatTime(f.now.Add(-5 * time.Minute)); west.Since != want {
		t.Errorf("kvm-west since %s, want the last target back, %s", west.Since, want)
	}
	if west.LastCheckedAgo != "3s" {
		t.Errorf("kvm-west last checked %s ago, want the newest check, 3s", west.LastCheckedAgo)
	}
	if d.Providers[2].Checked || d.Providers[2].Total != 0 {
		t.Errorf("kvm-new is shown as checked")
	}

	down := e.landingData(f.snap, landingFilter{State: "down"}, f.now)
	if len(down.Providers) != 2 || len(down.Providers[0].Up) != 0 || !strings.Contains(down.Providers[0].Hidden, "573 ready targets not shown") {
		t.Errorf("state=down: %d providers, first with %d ready listed and note %q", len(down.Providers), len(down.Providers[0].Up), down.Providers[0].Hidden)
	}
	up := e.landingData(f.snap, landingFilter{Provider: "kvm-east", State: "up"}, f.now)
	if len(up.Providers) != 1 || len(up.Providers[0].Down) != 0 || len(up.Providers[0].Up) != landingPageRows || up.Providers[0].FoldUp {
		t.Errorf("provider=kvm-east&state=up: %d providers, %d down listed, %d up (folded %v)", len(up.Providers), len(up.Providers[0].Down), len(up.Providers[0].Up), up.Providers[0].FoldUp)
	}
	none := e.landingData(f.snap, landingFilter{Provider: "nope"}, f.now)
	if len(none.Providers) != 0 || none.NoMatch != `No provider is named "nope".` || len(none.AllProviders) != 5 {
		t.Errorf("provider=nope: %d providers, note %q", len(none.Providers), none.NoMatch)
	}

	rec := httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/?state=sideways", nil), f.snap, f.now)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "unknown state") {
		t.Errorf("state=sideways: %d %q, want 400 naming the state", rec.Code, rec.Body.String())
	}
}

// chromium runs Debian's headless Chromium with args and returns its standard output. The
// browser and its helpers run in a process group of their own, killed if it overstays.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	testenv.SkipIfShort(t, "runs headless Chromium")
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Unavailable(t, "no chromium on PATH: install Debian's chromium package (scripts/install-test-deps.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, path, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

var renderedText = regexp.MustCompile(`(?s)RENDERED-TEXT-BEGIN\n(.*)\nRENDERED-TEXT-END`)

// TestLandingPageInChromium renders the status page of a 1,000-target snapshot in real headless
// Chromium and checks the text a person sees: the summary, providers with down targets first,
// every down target listed under its provider, the ready ones folded (not displayed), the
// filters; and keeps a screenshot (go test -artifacts keeps it under -outputdir).
func TestLandingPageInChromium(t *testing.T) {
	f := newFleet()
	e := landingExporter()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { e.renderLanding(w, r, f.snap, f.now) })
	// The page has no script; this test harness frames it and copies the frame's innerText,
	// which leaves out what is not displayed (a closed <details>), for --dump-dom to print.
	mux.HandleFunc("GET /text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><iframe id="f" src="/?%s" style="width:1400px;height:900px"></iframe><pre id="out"></pre>
<script>window.addEventListener('load', function () {
  document.getElementById('out').textContent = 'RENDERED-TEXT-BEGIN\n' + document.getElementById('f').contentDocument.body.innerText + '\nRENDERED-TEXT-END';
});</script></body></html>`, attrEscape(r.URL.RawQuery))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	text := func(t *testing.T, query string) string {
		t.Helper()
		dom := chromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/text?"+query)
		m := renderedText.FindSubmatch(dom)
		if m == nil {
			t.Fatalf("no rendered text in Chromium's DOM:\n%.2000s", dom)
		}
		return unescapeDOM(string(m[1]))
	}
	// at returns the position of s in page, failing when it is missing.
	at := func(t *testing.T, page, s string) int {
		t.Helper()
		i := strings.Index(page, s)
		if i < 0 {
			t.Errorf("the rendered page lacks %q", s)
		}
		return i
	}

	t.Run("all", func(t *testing.T) {
		page := text(t, "")
		at(t, page, "5 providers, 972 of 1000 targets ready; 28 targets down in 2 providers; 1 provider not checked yet.")
		east := at(t, page, "kvm-east (kvm) — 573/600 ready — worst reason: TCPUnreachable (20 of 27 down; 2 other reasons) — down since 2026-11-30 09:00:00 UTC for 3h — last checked 2026-11-30 11:59:40 UTC 20s ago")
		gcp := at(t, page, "gcp-prod (gcp) — 0/1 ready — worst reason: Forbidden (1 of 1 down)")
		fresh := at(t, page, "kvm-new (kvm) — not checked yet")
		cluster := at(t, page, "cluster-main (kubernetes) — 1/1 ready — ready since")
		west := at(t, page, "kvm-west (kvm) — 398/398 ready — ready since 2026-11-30 11:55:00 UTC for 5m — last checked 2026-11-30 11:59:57 UTC 3s ago")
		if !(east < gcp && gcp < fresh && fresh < cluster && cluster < west) {
			t.Errorf("provider rows out of order (down, not checked, healthy): kvm-east %d, gcp-prod %d, kvm-new %d, cluster-main %d, kvm-west %d", east, gcp, fresh, cluster, west)
		}
		fold := at(t, page, "222 ready targets of 573")
		for _, name := range f.down {
			if i := at(t, page, name+"\tdown\t"); name[:3] == "hv-" && (i < east || i > fold) {
				t.Errorf("down target %s is not listed under kvm-east before its folded ready targets", name)
			}
		}
		at(t, page, "Its 398 targets are on other pages.")
		at(t, page, "Targets 1–250 of 1000 (down targets first), page 1 of 4:")
		at(t, page, "2 transitions") // a target's history, folded
		if strings.Contains(page, "history-message-577") || strings.Contains(page, "none (first check)") {
			t.Errorf("a target's history is displayed, want it folded")
		}
		at(t, page, "storage pool default is inactive <b>boom</b>") // escaped: shown as text
		for _, hidden := range append(f.upEast, "hv-west-000", "hv-west-397") {
			if strings.Contains(page, hidden) {
				t.Errorf("ready target %s is displayed, want it folded", hidden)
			}
		}
		if t.Failed() {
			t.Logf("rendered text:\n%.6000s", page)
		}
	})

	t.Run("down only, one provider", func(t *testing.T) {
		page := text(t, "provider=kvm-east&state=down")
		at(t, page, "kvm-east (kvm) — 573/600 ready")
		at(t, page, "573 ready targets not shown (state filter: down only).")
		at(t, page, "hv-east-577\tdown\tTCPUnreachable")
		for _, absent := range []string{"gcp-prod (gcp)", "kvm-west (kvm)", "573 ready targets\n", f.upEast[0]} {
			if strings.Contains(page, absent) {
				t.Errorf("the filtered page displays %q", absent)
			}
		}
	})

	t.Run("ready only", func(t *testing.T) {
		page := text(t, "provider=kvm-west&state=up")
		at(t, page, "hv-west-000\tup\tReady") // unfolded
		at(t, page, "hv-west-249\tup\tReady")
		at(t, page, "250 of its 398 targets are on this page")
		if strings.Contains(page, "hv-west-250") {
			t.Error("page 1 displays the 251st row")
		}
		at(t, text(t, "provider=kvm-west&state=up&page=2"), "hv-west-397\tup\tReady")
		if strings.Contains(page, "kvm-east (kvm)") {
			t.Error("provider=kvm-west displays kvm-east")
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		shot := filepath.Join(t.ArtifactDir(), "status-page-1000-targets.png")
		chromium(t, "--window-size=1400,2400", "--hide-scrollbars", "--screenshot="+shot, srv.URL+"/")
		file, err := os.Open(shot)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		defer file.Close()
		cfg, err := png.DecodeConfig(file)
		if err != nil {
			t.Fatalf("the screenshot is not a PNG: %v", err)
		}
		if cfg.Width != 1400 || cfg.Height != 2400 {
			t.Errorf("screenshot %dx%d, want 1400x2400", cfg.Width, cfg.Height)
		}
		t.Logf("screenshot: %s", shot)
	})
}

// attrEscape keeps the query a literal attribute value in the harness page.
func attrEscape(q string) string {
	return strings.NewReplacer(`&`, `&amp;`, `"`, `&quot;`, `<`, `&lt;`).Replace(q)
}

// unescapeDOM turns the serialized <pre> text back into the text Chromium rendered.
func unescapeDOM(s string) string {
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&", "&nbsp;", "\u00a0").Replace(s)
}

// BenchmarkLanding1000Targets renders the status page of the 1,000-target fleet.
func BenchmarkLanding1000Targets(b *testing.B) { benchmarkLanding(b, newFleet()) }

// benchmarkLanding renders the status page of f's snapshot, unfiltered.
func benchmarkLanding(b *testing.B, f fleet) {
	e := landingExporter()
	req := httptest.NewRequest("GET", "/", nil)
	for b.Loop() {
		rec := &discardWriter{header: http.Header{}}
		e.renderLanding(rec, req, f.snap, f.now)
		if rec.code != 0 && rec.code != http.StatusOK {
			b.Fatalf("status %d", rec.code)
		}
		b.SetBytes(int64(rec.n))
	}
}

type discardWriter struct {
	header http.Header
	code   int
	n      int
}

func (d *discardWriter) Header() http.Header  { return d.header }
func (d *discardWriter) WriteHeader(code int) { d.code = code }
func (d *discardWriter) Write(p []byte) (int, error) {
	d.n += len(p)
	return io.Discard.Write(p)
}

// historyTarget is a kvm target whose last checks failed twice under failureThreshold 3, with
// more transitions than the runner keeps, one of them quoting markup.
func historyTarget(now time.Time) checks.TargetState {
	ts := checks.TargetState{
		TargetResult: checks.TargetResult{Target: `hv 1&x=<y>`, Up: true, Reason: checks.ReasonReady,
			Message:   "failures pending: 2 of 3 consecutive failed checks (failureThreshold) turn the target down; the last check: TCPUnreachable: refused",
			CheckedAt: now.Add(-10 * time.Second)},
		Since: now.Add(-time.Hour), CheckReason: kvm.ReasonTCPUnreachable, CheckMessage: "refused",
		ConsecutiveFailures: 2, Thresholds: checks.Thresholds{Failure: 3, Success: 1},
	}
	ts.History = append(ts.History, checks.Transition{At: now.Add(-13 * time.Hour), First: true, Up: true, Reason: checks.ReasonReady})
	for i := 1; i < checks.HistoryLength+2; i++ {
		up := i%2 == 0
		tr := checks.Transition{At: now.Add(time.Duration(i-13) * time.Hour), FromUp: !up, Up: up, Reason: checks.ReasonReady,
			Message: fmt.Sprintf("transition %d", i)}
		if !up {
			tr.Reason = kvm.ReasonPoolInactive
		} else {
			tr.FromReason = kvm.ReasonPoolInactive
		}
		if i == 9 {
			tr.Message = "pool <script>alert(1)</script> inactive"
		}
		ts.History = append(ts.History, tr)
	}
	return ts
}

var (
	historyRow = regexp.MustCompile(`<tr><td class="time">([^<]*)</td><td>([^<]*)</td><td class="(up|down)">(up|down)</td><td>([^<]*)</td><td>([^<]*)</td></tr>`)
	targetLink = regexp.MustCompile(`<tr class="target"><td><a href="([^"]*)">([^<]*)</a></td>`)
)

// TestLandingHistoryAndProbeLink: each target's last transitions are rendered newest first with
// when, from, to, reason and message, at most checks.HistoryLength of them, escaped, folded in a
// <details> of their own; a verdict held by a threshold says so with the raw reason; each target
// links to its debug probe with both names query-escaped; the page says a restart starts a new
// history.
func TestLandingHistoryAndProbeLink(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ts := historyTarget(now)
	snap := &checks.Snapshot{Round: 3, RoundStarted: now.Add(-15 * time.Second), Providers: []checks.ProviderState{
		{Name: "kvm-east", Type: "kvm", Targets: []checks.TargetState{ts}}}}
	rec := httptest.NewRecorder()
	landingExporter().renderLanding(rec, httptest.NewRequest("GET", "/", nil), snap, now)
	page := rec.Body.String()

	rows := historyRow.FindAllStringSubmatch(page, -1)
	if len(rows) != checks.HistoryLength {
		t.Fatalf("%d history rows, want the last %d of %d transitions:\n%s", len(rows), checks.HistoryLength, len(ts.History), page)
	}
	for i, row := range rows {
		tr := ts.History[len(ts.History)-1-i] // newest first
		from := "up"
		if !tr.FromUp {
			from = "down (PoolInactive)"
		}
		to := "down"
		if tr.Up {
			to = "up"
		}
		want := []string{formatTime(tr.At), from, to, to, string(tr.Reason), html.EscapeString(tr.Message)}
		if got := row[1:]; !slices.Equal(got, want) {
			t.Errorf("history row %d = %q, want %q", i, got, want)
		}
	}
	if strings.Contains(page, "<script>") || !strings.Contains(page, "pool &lt;script&gt;alert(1)&lt;/script&gt; inactive") {
		t.Errorf("a transition's message is not escaped")
	}
	if !strings.Contains(page, `<details class="history"><summary>10 transitions</summary>`) {
		t.Errorf("the history is not folded in its own <details> with its count")
	}
	if !strings.Contains(page, `up<br><span class="pending">failures pending (2 of 3): TCPUnreachable</span>`) {
		t.Errorf("the held verdict does not say failures are pending with the raw reason")
	}
	if !strings.Contains(page, "a restart of the exporter starts a new history") {
		t.Errorf("the page does not say that a restart starts a new history")
	}

	m := targetLink.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no link on the target's name:\n%s", page)
	}
	href := html.UnescapeString(m[1])
	if want := "probe?provider=kvm-east&target=hv+1%26x%3D%3Cy%3E&debug=true"; href != want {
		t.Errorf("probe link %q, want %q", href, want)
	}
	u, err := url.Parse(href)
	if err != nil || u.IsAbs() || u.Path != "probe" || u.Query().Get("provider") != "kvm-east" || u.Query().Get("target") != ts.Target || u.Query().Get("debug") != "true" {
		t.Errorf("probe link %q (%v) does not name the provider and target relatively", href, err)
	}
	if html.UnescapeString(m[2]) != ts.Target {
		t.Errorf("link text %q, want the target's name", m[2])
	}

	// A target unchanged since its first verdict lists no transitions.
	historyOf := func(h []checks.Transition) []landingTransition {
		one := ts
		one.History = h
		d := landingExporter().landingData(&checks.Snapshot{Providers: []checks.ProviderState{
			{Name: "kvm-east", Type: kvm.Type, Targets: []checks.TargetState{one}}}}, landingFilter{}, now)
		return slices.Concat(d.Providers[0].Down, d.Providers[0].Up)[0].History
	}
	if got := historyOf(ts.History[:1]); got != nil {
		t.Errorf("history of the first verdict only: %+v, want none listed", got)
	}
	if got := historyOf(ts.History[:2]); len(got) != 2 || got[1].From != "none (first check)" {
		t.Errorf("history of two transitions: %+v, want both, the first verdict last", got)
	}

	// A target recovering under successThreshold 2 reads down, with the raw Ready pending.
	ts.Up, ts.Reason, ts.CheckReason, ts.ConsecutiveFailures, ts.ConsecutiveSuccesses = false, kvm.ReasonPoolInactive, checks.ReasonReady, 0, 1
	ts.Thresholds.Success = 2
	if got := status.PendingNote(&ts); got != "recovery pending (1 of 2): Ready" {
		t.Errorf("recovery pending note %q", got)
	}
}

// BenchmarkLanding1000TargetsFullHistory renders the same page with every target's history
// full (checks.HistoryLength transitions each, as after a long flapping spell everywhere): the
// worst case of the page's size.
func BenchmarkLanding1000TargetsFullHistory(b *testing.B) {
	f := newFleet()
	for i := range f.snap.Providers {
		for j := range f.snap.Providers[i].Targets {
			ts := &f.snap.Providers[i].Targets[j]
			ts.History = historyTarget(f.now).History[2:]
		}
	}
	benchmarkLanding(b, f)
}

// TestLandingUncheckedAndWriter: targets without a verdict yet are listed as such, counted
// neither up nor down (bounded to landingUncheckedNames names); the ProviderHealth writer's
// section names the objects it cannot write, and says so when this replica does not write.
func TestLandingUncheckedAndWriter(t *testing.T) {
	f := newFleet()
	listed := f.now.Add(-3 * time.Minute)
	// kvm-west has 398 targets with a verdict and 30 more added by a reload, not contacted yet.
	west := &f.snap.Providers[3]
	if west.Name != "kvm-west" {
		t.Fatalf("the fleet's 4th provider is %s, want kvm-west", west.Name)
	}
	for i := range 30 {
		west.Unchecked = append(west.Unchecked, checks.UncheckedTarget{Target: fmt.Sprintf("hv-west-new-%02d", i), Listed: listed,
			Message: "not started: the round's deadline came while waiting for a concurrency slot"})
	}
	e := landingExporter()
	report := crdwriter.Report{Writing: true, SyncedRound: 41, Problems: []crdwriter.ObjectProblem{
		{Provider: "gcp-prod", Problem: crdwriter.ProblemFailing, Err: `providerhealths.providerhealth.io "gcp-prod" is forbidden: ValidatingAdmissionPolicy 'deny' denied request`,
			Since: f.now.Add(-10 * time.Minute), Attempts: 7, RetryAt: f.now.Add(2 * time.Minute)},
		{Provider: "kvm-east", Problem: crdwriter.ProblemNameClash, Since: f.now.Add(-time.Minute)},
	}}
	e.CRDReport = func() crdwriter.Report { return report }

	d := e.landingData(f.snap, landingFilter{}, f.now)
	if want := "5 providers, 972 of 1000 targets ready; 28 targets down in 2 providers; 30 more targets not checked yet; 1 provider not checked yet."; d.Summary != want {
		t.Errorf("summary %q, want %q", d.Summary, want)
	}
	var w *landingProvider
	for i := range d.Providers {
		if d.Providers[i].Name == "kvm-west" {
			w = &d.Providers[i]
		}
	}
	if w == nil || w.Ready != 398 || w.Total != 398 || w.DownTotal != 0 || w.Unchecked != 30 {
		t.Fatalf("kvm-west = %+v, want 398/398 ready, none down, 30 unchecked", w)
	}
	for _, want := range []string{"30 targets not checked yet, counted neither up nor down", "3m ago", "hv-west-new-00, ", "hv-west-new-19 and 10 more.",
		"hv-west-new-00: not started: the round's deadline came"} {
		if !strings.Contains(w.UncheckedNote, want) {
			t.Errorf("kvm-west's unchecked note %q lacks %q", w.UncheckedNote, want)
		}
	}
	if strings.Contains(w.UncheckedNote, "hv-west-new-20") {
		t.Errorf("the unchecked note lists more than %d names: %q", landingUncheckedNames, w.UncheckedNote)
	}

	rec := httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/", nil), f.snap, f.now)
	page := rec.Body.String()
	for _, want := range []string{
		`<tr class="unchecked-targets">`,
		`<h2 id="writer">ProviderHealth objects</h2>`,
		"2 cannot be written now (the others are written as usual; round 41 synced)",
		"<td>gcp-prod</td><td class=\"down\">failing</td>",
		"7 failed writes; next attempt in 2m",
		"ValidatingAdmissionPolicy &#39;deny&#39; denied request",
		"<td>kvm-east</td><td class=\"down\">name clash</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	report = crdwriter.Report{}
	rec = httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/", nil), f.snap, f.now)
	if page := rec.Body.String(); !strings.Contains(page, "This replica does not write the ProviderHealth objects now") || strings.Contains(page, "writer-problems") {
		t.Errorf("a replica that does not write: the writer section is wrong:\n%s", page[strings.Index(page, `id="writer"`):])
	}
	e.CRDReport = nil
	rec = httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/", nil), f.snap, f.now)
	if strings.Contains(rec.Body.String(), `id="writer"`) {
		t.Error("without a writer the page shows a writer section")
	}
}

func TestHumanDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{42 * time.Second, "42s"},
		{3*time.Minute + 59*time.Second, "3m"},
		{2 * time.Hour, "2h"},
		{5*time.Hour + 12*time.Minute, "5h12m"},
		{47*time.Hour + 59*time.Minute, "47h59m"},
		{48 * time.Hour, "2d"},
		{3*24*time.Hour + 4*time.Hour + 5*time.Minute, "3d4h"},
	} {
		if got := humanDuration(tc.d); got != tc.want {
			t.Errorf("humanDuration(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
