package exporter

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// contentSecurityPolicy is sent with every answer. The status page is the exporter's only HTML:
// it has one inline <style> block and no script, image or frame, and its filter form submits to
// itself. The policy allows that one block by its hash, computed from the embedded template
// (the block holds no template action, so the page renders it as written), and no other style:
// an edit of the block moves the hash with it. No page may frame it (clickjacking).
var contentSecurityPolicy = "default-src 'none'; style-src '" + styleHash() + "'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// styleHash is the CSP source of the status page's <style> block: sha256-<base64 of its hash>.
func styleHash() string {
	page, err := templates.ReadFile("templates/landing.html")
	if err != nil {
		panic(err)
	}
	_, rest, ok1 := strings.Cut(string(page), "<style>")
	block, _, ok2 := strings.Cut(rest, "</style>")
	if !ok1 || !ok2 || strings.Contains(block, "{{") {
		panic("templates/landing.html: want one <style> block without template actions")
	}
	sum := sha256.Sum256([]byte(block))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// Guard wraps the exporter's endpoints, outermost, so that every answer passes it (a route
// prefix's redirects and 404s too):
//   - every answer carries X-Content-Type-Options: nosniff (a browser never reads a check's
//     message in a plain-text answer as HTML or script), X-Frame-Options: DENY and the
//     Content-Security-Policy above;
//   - a request that changes state (POST /-/reload; every method but GET, HEAD and OPTIONS)
//     from another site is refused with 403, with or without basic auth: a browser's
//     Sec-Fetch-Site other than same-origin or none, or without it an Origin whose host is not
//     the request's Host (net/http's CrossOriginProtection). Clients that send neither header
//     (curl, Prometheus, a kubelet) are not browsers, and pass.
func Guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		setSecurityHeaders(h)
		if err := cop.Check(r); err != nil {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "refused: %s %s is a cross-origin request (Sec-Fetch-Site: %s, Origin: %s, Host: %s). "+
				"It is taken from the exporter's own origin or from clients that send no browser headers (curl, Prometheus), so that no other web page can make a browser send it.\n",
				r.Method, r.URL.Path, shown(r.Header.Get("Sec-Fetch-Site")), shown(r.Header.Get("Origin")), shown(r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// shown renders a header's value for a message: quoted and cut, or "absent".
func shown(v string) string {
	if v == "" {
		return "absent"
	}
	return strconv.Quote(cut(v, 100))
}

// setSecurityHeaders sets the headers every answer carries (Guard).
func setSecurityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
}

// HeadersOutermost puts the security headers around server's whole handler chain, the layers
// exporter-toolkit's web.Serve adds included: with --web.config.file the toolkit wraps
// server.Handler in its own handler when it starts serving (basic auth, rate limit), which
// answers 401 and 429 itself, before Guard runs. Serve calls BaseContext after that wrap and
// before it accepts a connection, so the headers are set there, once, around the toolkit's
// handler; the toolkit's configured headers (http_server_config.headers) still override them.
// net/http's own answers to requests it cannot parse (400 for a malformed request or plain
// HTTP to a TLS port, 431) are written before any handler, with a fixed text that holds
// nothing of the request.
func HeadersOutermost(server *http.Server) {
	var mu sync.Mutex
	server.BaseContext = func(net.Listener) context.Context {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := server.Handler.(headersFirst); !ok {
			server.Handler = headersFirst{server.Handler}
		}
		return context.Background()
	}
}

// headersFirst sets the security headers, then serves next (HeadersOutermost).
type headersFirst struct{ next http.Handler }

func (h headersFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	h.next.ServeHTTP(w, r)
}
