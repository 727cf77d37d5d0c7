package main

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestScrapeDuringStuckRound: while the first round is held inside a provider's Check, /metrics
// served by the exporter (promhttp over the registry and the snapshot's Gatherer)
// answers at once, in the text format and as Prometheus asks for it (OpenMetrics, gzip), with
// each provider's info and no verdict yet; once the check is let go, the verdicts appear.
func TestScrapeDuringStuckRound(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	release := f.Gate("alpha-project")
	t.Cleanup(release)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2"})
	// A long interval gives a long round deadline (15s): the round cannot end by itself while
	// the test scrapes.
	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=1m")
	testutil.Eventually(t, 20*time.Second, "the first check", func() bool { return f.Checked("alpha") > 0 })

	// A scrape that waited for the round would take 15s: the client gives up after 5s.
	client := &http.Client{Timeout: 5 * time.Second}
	scrape := func(accept, acceptEncoding string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, x.base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /metrics (Accept %q) during a stuck round: %v", accept, err)
		}
		defer resp.Body.Close()
		var body io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("reading /metrics: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics (Accept %q) during a stuck round: %d %q", accept, resp.StatusCode, b)
		}
		return string(b)
	}
	const prometheus3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
		"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
		"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
	for _, r := range []struct{ accept, acceptEncoding string }{
		{"text/plain;version=0.0.4", ""}, {prometheus3, "gzip"},
	} {
		body := scrape(r.accept, r.acceptEncoding)
		if v, ok := testutil.Metric(t, body, `proxy_operator_provider_info{provider="alpha",type="gcp"}`); !ok || v != 1 {
			t.Errorf("Accept %q: proxy_operator_provider_info of alpha = %v (present %v), want 1; body:\n%s", r.accept, v, ok, body)
		}
		if _, ok := testutil.Metric(t, body, "proxy_operator_provider_target_up"); ok {
			t.Errorf("Accept %q: a verdict while the first round is stuck; body:\n%s", r.accept, body)
		}
		if r.acceptEncoding == "gzip" && !strings.HasSuffix(body, "# EOF\n") {
			t.Errorf("Accept %q: not OpenMetrics (no final # EOF)", r.accept)
		}
	}
	if n := f.Checked("alpha"); n != 1 {
		t.Fatalf("%d checks of alpha, want 1: the round was not held", n)
	}

	release()
	testutil.Eventually(t, 20*time.Second, "the first round's verdicts on /metrics", func() bool {
		_, body := x.get("/metrics")
		v, ok := testutil.Metric(t, body, `proxy_operator_provider_target_up{provider="alpha",target="a1"}`)
		return ok && v == 1
	})
}
