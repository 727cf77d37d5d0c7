package exporter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// runExporter builds the exporter of the providers file at path as run() does, runs its rounds
// until the test ends, and returns it once its first round is done.
func runExporter(t testing.TB, path string, interval, timeout time.Duration) *Exporter {
	t.Helper()
	e, err := New(path, interval, timeout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.runner.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		e.Close()
	})
	select {
	case <-e.runner.FirstRound():
	case <-time.After(60 * time.Second):
		t.Fatal("the first round did not finish within 60s")
	}
	return e
}

// probeTestExporter builds an exporter over fake gcp providers, its first round done, and
// serves its handler; limit is the probes-in-flight bound of its /probe.
func probeTestExporter(t *testing.T, f *fakechecks.Checks, limit int, ps ...fakechecks.Provider) (*Exporter, *httptest.Server) {
	t.Helper()
	path := fakechecks.WriteProviders(t, "", ps...)
	e := runExporter(t, path, time.Minute, 15*time.Second)
	mux := http.NewServeMux()
	mux.Handle("GET /probe", newProbeHandler(e, limit))
	mux.Handle("/", e.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return e, srv
}

// TestProbe checks /probe over fake checkers: the Prometheus answer of an up and a down target,
// the debug trace, and that a probe changes neither the snapshot nor /metrics.
func TestProbe(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	e, srv := probeTestExporter(t, f, 0, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2,busy-a3"})
	client := srv.Client()
	snap := e.runner.Current()
	_, metricsBefore := testutil.Fetch(t, client, srv.URL+"/metrics")

	code, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=a1")
	s := testutil.ProbeSamples(t, body)
	if code != http.StatusOK || s["probe_success"] != 1 || s[`probe_reason{reason="Ready"}`] != 1 || len(s) != 3 {
		t.Errorf("up target: %d %v, want 200 with probe_success 1, probe_reason Ready, probe_duration_seconds", code, s)
	}
	if _, ok := s["probe_duration_seconds"]; !ok {
		t.Errorf("no probe_duration_seconds in %v", s)
	}
	code, body = testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=down-a2")
	s = testutil.ProbeSamples(t, body)
	if code != http.StatusOK || s["probe_success"] != 0 || s[`probe_reason{reason="APIError"}`] != 1 {
		t.Errorf("down target: %d %v, want 200 with probe_success 0 and reason APIError", code, s)
	}

	// Busy (another check held the target until the deadline): 503, no verdict made up.
	code, body = testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=busy-a3")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "busy with another check") ||
		!strings.Contains(body, "waiting for the running check") || strings.Contains(body, "probe_success") {
		t.Errorf("a busy target: %d %q, want 503 saying it was busy, without probe_success", code, body)
	}

	code, body = testutil.Fetch(t, client, srv.URL+"/probe?provider=alpha&target=down-a2&debug=true&timeout=3s")
	for _, want := range []string{`probe of target "down-a2" of provider "alpha"`, "deadline: 3s (timeout=3s)",
		"fake check", "verdict: APIError (down)", "message: <b>boom</b> from down-a2", "probe_success 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("the debug answer lacks %q:\n%s", want, body)
		}
	}
	if code != http.StatusOK {
		t.Errorf("debug answer: %d, want 200", code)
	}

	if e.runner.Current() != snap {
		t.Error("a probe published a new snapshot")
	}
	if _, after := testutil.Fetch(t, client, srv.URL+"/metrics"); testutil.VerdictLines(after) != testutil.VerdictLines(metricsBefore) {
		t.Errorf("the verdicts on /metrics changed after probes:\nbefore:\n%s\nafter:\n%s", testutil.VerdictLines(metricsBefore), testutil.VerdictLines(after))
	}
}

// TestProbeBadInput: every malformed request answers 400 saying what is wrong.
func TestProbeBadInput(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	_, srv := probeTestExporter(t, f, 0, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"}, fakechecks.Provider{Name: "beta", Project: "beta-project", Targets: "b1"})
	for _, c := range []struct {
		query  string
		header string
		want   []string
	}{
		{"", "", []string{"missing parameter provider and target"}},
		{"?provider=alpha", "", []string{"missing parameter target"}},
		{"?target=a1", "", []string{"missing parameter provider"}},
		{"?provider=gamma&target=a1", "", []string{`unknown provider "gamma"`, `"alpha", "beta"`}},
		{"?provider=alpha&target=b1", "", []string{`unknown target "b1" of provider "alpha"`, `its targets: "a1"`}},
		{"?provider=alpha&target=a1&timeout=soon", "", []string{`parameter timeout="soon"`, "positive duration"}},
		{"?provider=alpha&target=a1&timeout=0", "", []string{`parameter timeout="0"`}},
		{"?provider=alpha&target=a1&timeout=-2s", "", []string{`parameter timeout="-2s"`}},
		{"?provider=alpha&target=a1&timeout=", "", []string{`parameter timeout=""`}},
		{"?provider=alpha&target=a1&debug=yes-please", "", []string{`parameter debug="yes-please"`}},
	} {
		var headers []string
		if c.header != "" {
			headers = []string{scrapeTimeoutHeader, c.header}
		}
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe"+c.query, headers...)
		if code != http.StatusBadRequest {
			t.Errorf("%q (header %q): %d, want 400; body %q", c.query, c.header, code, body)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%q (header %q): body %q lacks %q", c.query, c.header, body, w)
			}
		}
	}
	resp, err := srv.Client().Post(srv.URL+"/probe?provider=alpha&target=a1", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /probe: %d, want 405", resp.StatusCode)
	}
}

// TestProbeTimeout: the deadline comes from the header (less the margin) or timeout=, the
// shorter of both, capped by the round timeout.
func TestProbeTimeout(t *testing.T) {
	for _, c := range []struct {
		round          time.Duration
		header, param  string
		want           time.Duration
		wantWhyContain string
	}{
		{15 * time.Second, "", "", 15 * time.Second, "--provider-check-timeout"},
		{0, "", "", MaxDerivedTimeout, "checks are off"},
		{15 * time.Second, "10", "", 9500 * time.Millisecond, "less a margin of 500ms"},
		{15 * time.Second, "1", "", 750 * time.Millisecond, "less a margin of 250ms"},
		{15 * time.Second, "60", "", 15 * time.Second, "capped by --provider-check-timeout 15s"},
		{15 * time.Second, "", "2s", 2 * time.Second, "timeout=2s"},
		{15 * time.Second, "", "2.5", 2500 * time.Millisecond, "timeout=2.5"},
		{15 * time.Second, "", "1m", 15 * time.Second, "capped"},
		{15 * time.Second, "10", "2s", 2 * time.Second, "timeout=2s"},
		{15 * time.Second, "2", "5s", 1500 * time.Millisecond, "X-Prometheus-Scrape-Timeout-Seconds 2"},
	} {
		e := &Exporter{timeout: c.round}
		r := httptest.NewRequest(http.MethodGet, "/probe?provider=p&target=t", nil)
		if c.param != "" {
			r = httptest.NewRequest(http.MethodGet, "/probe?provider=p&target=t&timeout="+c.param, nil)
		}
		if c.header != "" {
			r.Header.Set(scrapeTimeoutHeader, c.header)
		}
		d, err := e.probeTimeout(r)
		if err != nil || d.timeout != c.want || !strings.Contains(d.why, c.wantWhyContain) {
			t.Errorf("round %s, header %q, timeout=%q: %s (%s) %v, want %s (%q)", c.round, c.header, c.param, d.timeout, d.why, err, c.want, c.wantWhyContain)
		}
	}
}

// TestProbeQueueIsNotAnOutage is the reproduction: 12 probes at once of healthy
// targets whose checks are slow. With one limit of 10 for the whole exporter, 2 of them waited
// for a place and answered 200 probe_success 0, reason Timeout. Each provider now has its own
// places: the checks of all 12 providers are held running at once (which a shared limit of 10
// would never allow), then released, and every probe answers probe_success 1; two probes of the
// same target at once (two Prometheus replicas) both answer too. Nothing here depends on how
// fast the machine is: the checks end when the test releases them.
func TestProbeQueueIsNotAnOutage(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	var ps []fakechecks.Provider
	for i := range 12 {
		name := fmt.Sprintf("gce-%02d", i)
		ps = append(ps, fakechecks.Provider{Name: name, Project: name + "-project", Targets: "t-" + name})
	}
	_, srv := probeTestExporter(t, f, 0, ps...)
	client := &http.Client{Timeout: 2 * time.Minute}
	for _, perTarget := range []int{1, 2} {
		before := map[string]int{}
		var releases []func()
		for _, p := range ps {
			before[p.Name] = f.Checked(p.Name)
			releases = append(releases, f.Gate(p.Project))
		}
		type answer struct {
			q    string
			code int
			body string
		}
		answers := make(chan answer, len(ps)*perTarget)
		for _, p := range ps {
			for range perTarget {
				go func() {
					q := "/probe?provider=" + p.Name + "&target=" + p.Targets
					code, body := fetchNoFatal(client, srv.URL+q)
					answers <- answer{q, code, body}
				}()
			}
		}
		testutil.Eventually(t, time.Minute, "the checks of all 12 providers to run at once", func() bool {
			for _, p := range ps {
				if f.Checked(p.Name) == before[p.Name] {
					return false
				}
			}
			return true
		})
		for _, release := range releases {
			release()
		}
		for range len(ps) * perTarget {
			a := <-answers
			if s := testutil.ProbeSamples(t, a.body); a.code != http.StatusOK || s["probe_success"] != 1 || s[`probe_reason{reason="Ready"}`] != 1 {
				t.Errorf("%d probes of each of %d healthy targets at once: %s answered %d %v, want 200 probe_success 1, reason Ready",
					perTarget, len(ps), a.q, a.code, s)
			}
		}
	}
}

// TestProbeThatCannotBeServedIsAnError: when the exporter truly cannot serve a probe in time
// (here a provider allowed one probe at a time, two probes of 600ms checks under a 1s scrape
// timeout), the probe that waited answers 503 saying so, so Prometheus reads up 0 for that
// scrape: never probe_success 0 with a Timeout the target did not earn. The time it queued is
// not charged to the target; the probe that did not wait answers its verdict.
func TestProbeThatCannotBeServedIsAnError(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	_, srv := probeTestExporter(t, f, 1, fakechecks.Provider{Name: "gce", Project: "gce-project", Targets: "slow-a,slow-b"})
	client := &http.Client{Timeout: time.Second}
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, 2)
	for _, target := range []string{"slow-a", "slow-b"} {
		go func() {
			code, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=gce&target="+target, scrapeTimeoutHeader, "1")
			answers <- answer{code, body}
		}()
	}
	var served, refused int
	for range 2 {
		a := <-answers
		switch {
		case a.code == http.StatusOK:
			if s := testutil.ProbeSamples(t, a.body); s["probe_success"] != 1 {
				t.Errorf("the probe that got the place: %v, want probe_success 1", s)
			}
			served++
		case a.code == http.StatusServiceUnavailable:
			if !strings.Contains(a.body, "after waiting") || !strings.Contains(a.body, `probes of provider "gce" in flight (at most 1 at once)`) ||
				strings.Contains(a.body, "probe_success") {
				t.Errorf("the probe that waited: %q, want a 503 naming the wait, without probe_success", a.body)
			}
			refused++
		default:
			t.Errorf("a probe answered %d %q, want 200 for the first and 503 for the one that waited", a.code, a.body)
		}
	}
	if served != 1 || refused != 1 {
		t.Errorf("%d probes served and %d refused, want 1 and 1", served, refused)
	}
}

// TestProbeConcurrency: a bounded number of probes of a provider in flight; a probe that cannot
// start before its deadline answers 503 saying why, and the first one still answers.
func TestProbeConcurrency(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	_, srv := probeTestExporter(t, f, 1, fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,a2"})
	checksBefore := f.Checked("alpha")
	release := f.Gate("alpha-project")
	defer release()
	type answer struct {
		code int
		body string
	}
	first := make(chan answer, 1)
	go func() {
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=a1&timeout=30s")
		first <- answer{code, body}
	}()
	testutil.Eventually(t, 20*time.Second, "the first probe to be running", func() bool {
		return f.Checked("alpha") == checksBefore+1
	})

	// A second probe of the same target shares the running check: when its deadline comes
	// the check has run all of it without an answer, a Timeout the target earned.
	code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=a1&timeout=300ms")
	if s := testutil.ProbeSamples(t, body); code != http.StatusOK || s["probe_success"] != 0 || s[`probe_reason{reason="Timeout"}`] != 1 {
		t.Errorf("a second probe of the same target: %d %q, want 200 probe_success 0, reason Timeout", code, body)
	}
	code, body = testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=a2&timeout=300ms&debug=true")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `1 probes of provider "alpha" were still running at the deadline (at most 1 at once)`) ||
		!strings.Contains(body, "wait for a place among the provider's probes in flight") {
		t.Errorf("a probe beyond the limit: %d %q, want 503 naming the limit, with the wait in the trace", code, body)
	}
	if n := f.Checked("alpha"); n != checksBefore+1 {
		t.Errorf("%d checks ran, want only the first probe's", n-checksBefore)
	}
	release()
	a := <-first
	if s := testutil.ProbeSamples(t, a.body); a.code != http.StatusOK || s["probe_success"] != 1 {
		t.Errorf("the first probe: %d %v, want 200 with probe_success 1", a.code, s)
	}
	// Waiting, not refusing: a probe of another target that arrives while the provider's place
	// is taken gets its turn when the running probe ends within its deadline.
	release2 := f.Gate("alpha-project")
	go func() {
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=a1&timeout=30s")
		first <- answer{code, body}
	}()
	testutil.Eventually(t, 20*time.Second, "the next probe to be running", func() bool {
		return f.Checked("alpha") == checksBefore+2
	})
	second := make(chan answer, 1)
	go func() {
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=a2&timeout=30s")
		second <- answer{code, body}
	}()
	release2()
	for _, ch := range []chan answer{first, second} {
		if a := <-ch; a.code != http.StatusOK {
			t.Errorf("probes of one target in turn: %d %q, want 200", a.code, a.body)
		}
	}
}

// TestProbeMaintenance: a probe of a target the operator put in maintenance (the providers
// file's maintenance label) answers as the rounds publish it: Maintenance (probe_success 0,
// probe_reason Maintenance), with what the live check found in the message; a target whose
// own label says "false" answers its check.
func TestProbeMaintenance(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := filepath.Join(t.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(`providers:
  - name: alpha
    type: gcp
    labels: {maintenance: "true"}
    gcp:
      project: alpha-project
      filter: "a1,down-a2"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := runExporter(t, path, time.Minute, 15*time.Second)
	mux := http.NewServeMux()
	mux.Handle("GET /probe", newProbeHandler(e, 0))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, target := range []string{"a1", "down-a2"} {
		code, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target="+target)
		s := testutil.ProbeSamples(t, body)
		if code != http.StatusOK || s["probe_success"] != 0 || s[`probe_reason{reason="Maintenance"}`] != 1 {
			t.Errorf("%s in maintenance: %d %v, want 200 with probe_success 0 and reason Maintenance", target, code, s)
		}
	}
	_, body := testutil.Fetch(t, srv.Client(), srv.URL+"/probe?provider=alpha&target=down-a2&debug=true")
	if want := "message: in maintenance (label maintenance=true): counted neither up nor down; the last check: APIError: "; !strings.Contains(body, want) {
		t.Errorf("the debug answer lacks %q:\n%s", want, body)
	}
	var reason checks.Reason
	for _, p := range e.runner.Current().Providers {
		for _, ts := range p.Targets {
			if p.Name == "alpha" && ts.Target == "a1" {
				reason = ts.Reason
			}
		}
	}
	if reason != checks.ReasonMaintenance {
		t.Errorf("the round's verdict of a1: %q, want Maintenance as the probe says", reason)
	}
}

// fetchNoFatal is testutil.Fetch for a goroutine of a test: a failed request is an answer with
// code 0 and the error as its body, which the test reports.
func fetchNoFatal(client *http.Client, url string, headers ...string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}
