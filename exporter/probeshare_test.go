package exporter

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestProbeShared: probes of one target at once share one check; each target of a provider
// has its own check and its own verdict, never another's; with --web.probe-min-interval a
// probe after the check's end gets its answer without a new check, and after the interval a
// new check runs.
func TestProbeShared(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	e, srv := probeTestExporter(t, f, 0, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2"})
	client := &http.Client{Timeout: 60 * time.Second}
	before := f.Checked("alpha")
	release := f.Gate("alpha-project")
	const callers = 20
	type answer struct {
		target string
		code   int
		body   string
	}
	answers := make(chan answer, 2*callers)
	var wg sync.WaitGroup
	for i := range 2 * callers {
		target := []string{"a1", "down-a2"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(srv.URL + "/probe?provider=alpha&target=" + target + "&timeout=30s")
			if err != nil {
				answers <- answer{target, 0, err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- answer{target, resp.StatusCode, string(b)}
		}()
	}
	testutil.Eventually(t, 20*time.Second, "both targets' checks to be running", func() bool {
		return f.Checked("alpha") >= before+2
	})
	// Let the late callers arrive while the checks are held.
	time.Sleep(200 * time.Millisecond)
	release()
	wg.Wait()
	close(answers)
	for a := range answers {
		s := testutil.ProbeSamples(t, a.body)
		want := map[string]string{"a1": "Ready", "down-a2": "APIError"}[a.target]
		if a.code != http.StatusOK || s[`probe_reason{reason="`+want+`"}`] != 1 || len(s) != 3 {
			t.Errorf("probe of %s: %d %q, want 200 with reason %s only", a.target, a.code, a.body, want)
		}
	}
	if n := f.Checked("alpha") - before; n != 2 {
		t.Errorf("%d probes of each of 2 targets at once made %d checks, want 2 (one per target)", callers, n)
	}

	// Within the interval: the last check's answer, no new check.
	e.ProbeMinInterval = time.Hour
	before = f.Checked("alpha")
	testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=a1")
	code, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=a1&debug=true")
	if n := f.Checked("alpha") - before; n != 1 || code != http.StatusOK ||
		!strings.Contains(body, "answer: the answer of a check that ended") || !strings.Contains(body, "verdict: Ready (up)") {
		t.Errorf("two probes within --web.probe-min-interval: %d checks, %d\n%s\nwant 1 check and the second answered from it", n, code, body)
	}
	_, body = testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=down-a2")
	if s := testutil.ProbeSamples(t, body); s[`probe_reason{reason="APIError"}`] != 1 {
		t.Errorf("another target within the interval of a1's check: %v, want its own verdict APIError", s)
	}
	// Past the interval: a new check.
	e.ProbeMinInterval = time.Nanosecond
	before = f.Checked("alpha")
	testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=a1")
	if n := f.Checked("alpha") - before; n != 1 {
		t.Errorf("a probe past --web.probe-min-interval made %d checks, want 1", n)
	}
}

// TestProbeScrapeTimeoutHeader: whatever the header holds, the deadline is sane (the round
// timeout, or the header's value less the margin, at least minProbeTimeout and at most the
// round timeout) and the probe is never refused for it.
func TestProbeScrapeTimeoutHeader(t *testing.T) {
	for _, c := range []struct {
		header string
		want   time.Duration
		why    string
	}{
		{"", 15 * time.Second, "--provider-check-timeout"},
		{"ten", 15 * time.Second, `X-Prometheus-Scrape-Timeout-Seconds ten ignored (not a positive number of seconds)`},
		{"-5", 15 * time.Second, "-5 ignored"},
		{"0", 15 * time.Second, "0 ignored"},
		{"NaN", 15 * time.Second, "NaN ignored"},
		{"-Inf", 15 * time.Second, "ignored"},
		{"+Inf", 15 * time.Second, "capped by --provider-check-timeout 15s"},
		{"1e300", 15 * time.Second, "capped by --provider-check-timeout 15s"},
		{"1e400", 15 * time.Second, "capped"},
		{"9223372037", 15 * time.Second, "capped"},
		{"1e-300", minProbeTimeout, "raised to the least deadline 100ms"},
		{"0.05", minProbeTimeout, "raised to the least deadline"},
		{" 10 ", 9500 * time.Millisecond, "less a margin of 500ms"},
		{"2", 1500 * time.Millisecond, "less a margin of 500ms"},
		{strings.Repeat("9", 5000), 15 * time.Second, "(cut, 5000 bytes)"},
		{strings.Repeat("x", 5000), 15 * time.Second, "(cut, 5000 bytes) ignored"},
	} {
		e := &Exporter{timeout: 15 * time.Second}
		r := httptest.NewRequest(http.MethodGet, "/probe?provider=p&target=t", nil)
		if c.header != "" {
			r.Header.Set(scrapeTimeoutHeader, c.header)
		}
		d, err := e.probeTimeout(r)
		if err != nil || d.timeout != c.want || !strings.Contains(d.why, c.why) || len(d.why) > 300 {
			t.Errorf("header %.20q: %s (%s) %v, want %s (%q), no error", c.header, d.timeout, d.why, err, c.want, c.why)
		}
	}
	// timeout= beyond what a duration holds is capped, not refused.
	e := &Exporter{timeout: 15 * time.Second}
	for _, p := range []string{"1e300", "+Inf", fmt.Sprint(math.MaxFloat64)} {
		d, err := e.probeTimeout(httptest.NewRequest(http.MethodGet, "/probe?provider=p&target=t&timeout="+url.QueryEscape(p), nil))
		if err != nil || d.timeout != 15*time.Second {
			t.Errorf("timeout=%s: %s %v, want the cap 15s", p, d.timeout, err)
		}
	}
}

// TestProbeHugeScrapeTimeoutIsNoFailure is the reproduction: a healthy target probed
// with X-Prometheus-Scrape-Timeout-Seconds: 1e300 answered probe_success 0, reason Timeout (the
// deadline overflowed). Every odd header value now answers the target's verdict.
func TestProbeHugeScrapeTimeoutIsNoFailure(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	_, srv := probeTestExporter(t, f, 0, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	for _, h := range []string{"1e300", "+Inf", "NaN", "-1", "0", "garbage", "1e-300"} {
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=a1", scrapeTimeoutHeader, h)
		if s := testutil.ProbeSamples(t, body); code != http.StatusOK || s["probe_success"] != 1 {
			t.Errorf("header %q: %d %q, want 200 probe_success 1", h, code, body)
		}
	}
}

// TestProbeCheckOutlastingItsDeadlineIsATimeout: a probe whose own check (it started it, no
// other probe held a place) runs past the probe's deadline answers the target's verdict,
// Timeout, never a 503 that blames a wait for a place: the few microseconds between the probe's
// arrival and its check's start are no queue.
func TestProbeCheckOutlastingItsDeadlineIsATimeout(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	_, srv := probeTestExporter(t, f, 0, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	release := f.Gate("alpha-project")
	defer release()
	for i := range 5 {
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+fmt.Sprintf("/probe?provider=alpha&target=a1&timeout=%dms", 100+i))
		if s := testutil.ProbeSamples(t, body); code != http.StatusOK || s["probe_success"] != 0 || s[`probe_reason{reason="Timeout"}`] != 1 {
			t.Errorf("probe %d of a check held past its deadline: %d %q, want 200 probe_success 0, reason Timeout", i, code, body)
		}
	}
}
