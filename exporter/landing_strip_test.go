package exporter

import (
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// The strip cells' colours (landing.go's style), used nowhere else on the page.
var (
	stripReady  = [3]uint8{0x3f, 0xb9, 0x50}
	stripFailed = [3]uint8{0xe5, 0x53, 0x4b}
	stripNoCont = [3]uint8{0xa0, 0xa8, 0xb0}
)

// stripFleet is n targets of one kvm provider, every one with a full strip: every tenth down
// (its last 20 checks TCPUnreachable, after 10 Ready), every seventh ready with one round that
// did not contact it; the others always Ready.
func stripFleet(n int) (*checks.Snapshot, time.Time) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ps := checks.ProviderState{Name: "kvm-strip", Type: kvm.Type}
	for i := range n {
		t := checks.TargetState{TargetResult: checks.TargetResult{Target: fmt.Sprintf("hv-%04d", i), Up: true, Reason: checks.ReasonReady,
			CheckedAt: now.Add(-time.Second)}, Since: now.Add(-time.Hour)}
		for k := range checks.RecentLength {
			c := checks.RecentCheck{At: now.Add(time.Duration(k-checks.RecentLength) * time.Minute), Up: true, Reason: checks.ReasonReady}
			switch {
			case i%10 == 0 && k >= 10:
				c.Up, c.Reason = false, kvm.ReasonTCPUnreachable
			case i%10 != 0 && i%7 == 0 && k == 15:
				c.Up, c.Reason, c.NotContacted = false, checks.ReasonTimeout, true
			}
			t.Recent = append(t.Recent, c)
		}
		if i%10 == 0 {
			t.Up, t.Reason = false, kvm.ReasonTCPUnreachable
		}
		ps.Targets = append(ps.Targets, t)
	}
	return &checks.Snapshot{Round: 30, RoundStarted: now.Add(-2 * time.Second), Providers: []checks.ProviderState{ps}}, now
}

// TestLandingStrip: each target's row shows its recent checks as a strip, one cell per check
// (Ready, failed, not contacted), titled with what they read; the provider's row gives the
// share of its recent checks that read Ready, and the API the same ratio.
func TestLandingStrip(t *testing.T) {
	s, now := stripFleet(10) // hv-0000 down; hv-0007 missed a round
	e := landingExporter()
	rec := httptest.NewRecorder()
	e.renderLanding(rec, httptest.NewRequest("GET", "/?state=", nil), s, now)
	page := rec.Body.String()
	row := func(name string) string {
		i := strings.Index(page, ">"+name+"</a>")
		if i < 0 {
			t.Fatalf("no row for %s", name)
		}
		r := page[i:]
		return r[:strings.Index(r, "</tr>")]
	}
	down := row("hv-0000")
	if n, m := strings.Count(down, `<i class="o"></i>`), strings.Count(down, `<i class="f"></i>`); n != 10 || m != 20 {
		t.Errorf("hv-0000's strip: %d Ready and %d failed cells, want 10 and 20", n, m)
	}
	if !strings.Contains(down, `title="the last 30 checks, oldest first, from 2026-11-30 11:30:00 UTC: 10 Ready, 20 TCPUnreachable"`) {
		t.Errorf("hv-0000's strip lacks its summary:\n%s", down)
	}
	if missed := row("hv-0007"); strings.Count(missed, `<i class="n"></i>`) != 1 || !strings.Contains(missed, "29 Ready, 1 not contacted") {
		t.Errorf("hv-0007's strip does not show its one round without contact:\n%s", missed)
	}
	// 10 targets × 30 checks: 20 failed, 1 not contacted (left out): 279 of 299 read Ready.
	if !strings.Contains(page, "recent checks: 93.3% ready (279 of 299)") {
		t.Errorf("the provider's row lacks the share of recent checks that read Ready")
	}
	_, out, _ := statusJSON(t, e, "", s, now)
	if r := out["data"].(map[string]any)["providers"].([]any)[0].(map[string]any)["recentReadyRatio"]; r != 279.0/299.0 {
		t.Errorf("the API's recentReadyRatio %v, want 279/299", r)
	}
	if got := percent(999, 1000); got != "99.9%" {
		t.Errorf("percent(999, 1000) = %s", got)
	}
	if got := percent(9999, 10000); got != "99.9%" {
		t.Errorf("percent(9999, 10000) = %s, want 99.9%% (never rounded up to 100%%)", got)
	}
}

// TestLandingStripInChromium renders the strips in real headless Chromium, at 10 and at 5,000
// targets, and reads the screenshot: the cells are drawn in their colours, in the proportions of
// the checks (a down target's 20 failed checks to its 10 Ready ones), and at 5,000 targets page
// 1's 250 rows each carry their 30 cells in the DOM Chromium built.
func TestLandingStripInChromium(t *testing.T) {
	for _, n := range []int{10, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s, now := stripFleet(n)
			e := landingExporter()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.renderLanding(w, r, s, now) }))
			t.Cleanup(srv.Close)

			// Down targets only: their strips mix Ready and failed cells, 10 to 20.
			shot := filepath.Join(t.ArtifactDir(), fmt.Sprintf("status-strip-%d-targets.png", n))
			chromium(t, "--window-size=1600,1200", "--hide-scrollbars", "--screenshot="+shot, srv.URL+"/?state=down")
			px := colours(t, shot)
			ready, failed := px[stripReady], px[stripFailed]
			if ready == 0 || failed == 0 {
				t.Fatalf("the screenshot shows %d Ready and %d failed strip pixels, want both", ready, failed)
			}
			if r := float64(failed) / float64(ready); r < 1.8 || r > 2.2 {
				t.Errorf("failed to Ready strip pixels %d:%d (%.2f), want the checks' 20:10", failed, ready, r)
			}
			// Every target, unfolded: the rounds without contact show too.
			chromium(t, "--window-size=1600,1200", "--hide-scrollbars", "--screenshot="+shot, srv.URL+"/?state=up")
			if px := colours(t, shot); px[stripNoCont] == 0 || px[stripReady] == 0 {
				t.Errorf("ready targets' strips: %d not-contacted and %d Ready pixels, want both", px[stripNoCont], px[stripReady])
			}
			dom := string(chromium(t, "--dump-dom", srv.URL+"/?state=up"))
			rows := min(n-n/10, landingPageRows)
			if cells := strings.Count(dom, `<i class="o"></i>`) + strings.Count(dom, `<i class="n"></i>`); cells != rows*checks.RecentLength {
				t.Errorf("Chromium's DOM holds %d strip cells, want %d rows × %d", cells, rows, checks.RecentLength)
			}
		})
	}
}

// colours counts the screenshot's pixels of each colour.
func colours(t *testing.T, path string) map[[3]uint8]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	out := map[[3]uint8]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			out[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]++
		}
	}
	return out
}
