package exporter

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestSecurityHeaders: every answer carries nosniff, the frame refusal and the policy; the
// status page is HTML and gets them too.
func TestSecurityHeaders(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	srv := httptest.NewServer(runExporter(t, path, time.Minute, 15*time.Second).Handler())
	t.Cleanup(srv.Close)
	for _, p := range []string{"/", "/metrics", "/api/v1/status", "/-/healthy", "/-/ready", "/probe?provider=alpha&target=a1", "/probe", "/nothing-here"} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s (%d): headers %v, want nosniff, X-Frame-Options DENY and the policy", p, resp.StatusCode, h)
		}
		if p == "/" && !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Errorf("GET /: Content-Type %q, want the HTML page", h.Get("Content-Type"))
		}
	}
}

// TestPolicyAllowsThePageStyleOnly: the policy allows no inline style but the status page's
// own <style> block, as the page renders it (its sha256), and the page has no other inline
// style, script or style attribute the policy would block.
func TestPolicyAllowsThePageStyleOnly(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1,down-a2"})
	srv := httptest.NewServer(runExporter(t, path, time.Minute, 15*time.Second).Handler())
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	_, rest, _ := strings.Cut(page, "<style>")
	block, _, ok := strings.Cut(rest, "</style>")
	if !ok || strings.Count(page, "<style") != 1 {
		t.Fatalf("want the page to have exactly one <style> block:\n%.2000s", page)
	}
	sum := sha256.Sum256([]byte(block))
	csp := resp.Header.Get("Content-Security-Policy")
	if want := "style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "';"; !strings.Contains(csp, want) || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("policy %q; want %q and no 'unsafe-inline'", csp, want)
	}
	for _, bad := range []string{"<script", " style=", " onclick=", " onload="} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q, which the policy blocks", bad)
		}
	}
}

// TestReloadRefusesCrossSite: POST /-/reload from another site is refused with 403 and a body
// saying why, even without auth; curl- and Prometheus-style clients (no browser headers) and a
// same-origin page still reload.
func TestReloadRefusesCrossSite(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	path := fakechecks.WriteProviders(t, "", fakechecks.Provider{Name: "alpha", Project: "alpha-project", Targets: "a1"})
	e := runExporter(t, path, time.Minute, 15*time.Second)
	e.Lifecycle = true
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name    string
		headers []string
		want    int
		body    string
	}{
		{"curl", nil, http.StatusOK, "Reloaded"},
		{"same origin", []string{"Sec-Fetch-Site", "same-origin", "Origin", srv.URL}, http.StatusOK, "Reloaded"},
		{"typed by the user", []string{"Sec-Fetch-Site", "none"}, http.StatusOK, "Reloaded"},
		{"old browser, same host", []string{"Origin", srv.URL}, http.StatusOK, "Reloaded"},
		{"cross-site form", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, http.StatusForbidden, `Sec-Fetch-Site: "cross-site", Origin: "https://evil.example", Host: "` + host + `"`},
		{"same-site, another origin", []string{"Sec-Fetch-Site", "same-site", "Origin", "http://other.localhost"}, http.StatusForbidden, "is a cross-origin request"},
		{"old browser, other host", []string{"Origin", "https://evil.example"}, http.StatusForbidden, "Sec-Fetch-Site: absent"},
		{"opaque origin", []string{"Origin", "null"}, http.StatusForbidden, `Origin: "null"`},
	} {
		code, body := testutil.Request(t, srv.Client(), http.MethodPost, srv.URL+"/-/reload", c.headers...)
		if code != c.want || !strings.Contains(body, c.body) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, body, c.want, c.body)
		}
	}
}
