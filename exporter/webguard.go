package exporter

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
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
