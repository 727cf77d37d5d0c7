package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

func TestParseWebPaths(t *testing.T) {
	for _, c := range []struct {
		external, route string
		want            webPaths
		err             string
	}{
		{"", "", webPaths{}, ""},
		{"http://proxy.example/", "", webPaths{}, ""},
		{"https://proxy.example/tools/phe/", "", webPaths{"/tools/phe", "/tools/phe"}, ""},
		{"https://proxy.example/phe", "/", webPaths{"/phe", ""}, ""},
		{"", "/inner/", webPaths{"", "/inner"}, ""},
		{"proxy.example/phe", "", webPaths{}, "--web.external-url=proxy.example/phe: want an absolute http or https URL"},
		{"https://proxy.example/phe?x=1", "", webPaths{}, "--web.external-url=https://proxy.example/phe?x=1: want"},
		{"", "phe", webPaths{}, "--web.route-prefix=phe: want a path starting with /"},
	} {
		got, err := parseWebPaths(c.external, c.route)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q %q: err %v, want %q", c.external, c.route, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q %q: %+v, %v; want %+v", c.external, c.route, got, err, c.want)
		}
	}
}

// TestExternalURL: with --web.external-url naming a path, every endpoint is served under it (the
// root and the bare path redirect to the status page, other paths are not found), and the
// status page's links (metrics, health, readiness, the API, the filter, each target's probe)
// start with it. With --web.route-prefix=/ (a proxy that strips the path) the endpoints are at
// the root while the links keep the external path.
func TestExternalURL(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2"})
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	links := []string{`href="/tools/phe/metrics"`, `href="/tools/phe/-/healthy"`, `href="/tools/phe/-/ready"`,
		`href="/tools/phe/api/v1/status"`, `action="/tools/phe/"`,
		`href="/tools/phe/probe?provider=alpha&amp;target=down-a2&amp;debug=true"`}

	x := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s", "--web.external-url=https://proxy.example/tools/phe/")
	testutil.Eventually(t, 20*time.Second, "readiness under the prefix", func() bool { code, _ := x.get("/tools/phe/-/ready"); return code == 200 })
	code, body := x.get("/tools/phe/")
	if code != http.StatusOK {
		t.Fatalf("/tools/phe/: %d", code)
	}
	for _, l := range links {
		if !strings.Contains(body, l) {
			t.Errorf("the status page lacks the link %s", l)
		}
	}
	if strings.Contains(body, `href="metrics"`) {
		t.Error("the status page still links metrics relative to itself")
	}
	for p, want := range map[string]int{
		"/tools/phe/metrics": 200, "/tools/phe/api/v1/status": 200, "/tools/phe/-/healthy": 200,
		"/tools/phe/probe?provider=alpha&target=a1": 200, "/metrics": 404, "/api/v1/status": 404, "/tools/phe/nonexistent": 404,
	} {
		if code, _ := x.get(p); code != want {
			t.Errorf("GET %s: %d, want %d", p, code, want)
		}
	}
	for _, p := range []string{"/", "/tools/phe"} {
		resp, err := noRedirect.Get(x.base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/tools/phe/" {
			t.Errorf("GET %s: %d to %q, want a redirect to /tools/phe/", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// Every answer carries the security headers: the prefix's own redirects and 404s too, and a
	// cross-origin POST outside the prefix is refused like one inside it.
	for _, p := range []string{"/", "/tools/phe", "/metrics", "/tools/phe/nonexistent", "/tools/phe/"} {
		resp, err := noRedirect.Get(x.base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := resp.Header; h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("GET %s (%d) lacks the security headers: %v", p, resp.StatusCode, h)
		}
	}
	if code, body := testutil.Request(t, x.client, http.MethodPost, x.base+"/elsewhere", "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
		t.Errorf("a cross-site POST outside the prefix: %d %q, want 403", code, body)
	}

	y := startExporter(t, "http", "--config.file="+path, "--provider-check-interval=10s",
		"--web.external-url=https://proxy.example/tools/phe", "--web.route-prefix=/")
	testutil.Eventually(t, 20*time.Second, "readiness at the root", func() bool { code, _ := y.get("/-/ready"); return code == 200 })
	code, body = y.get("/")
	if code != http.StatusOK || !strings.Contains(body, links[0]) || !strings.Contains(body, links[5]) {
		t.Errorf("/ with --web.route-prefix=/: %d, links:\n%s", code, body)
	}
	if code, _ := y.get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics with --web.route-prefix=/: %d", code)
	}
}
