package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// webPaths are the paths --web.external-url and --web.route-prefix give: external starts the
// status page's links, route the endpoints' paths. Both are "" for the root, else a path
// starting with a slash and not ending with one.
type webPaths struct {
	external, route string
}

// parseWebPaths reads the two flags as Prometheus does: the route prefix defaults to the
// external URL's path.
func parseWebPaths(externalURL, routePrefix string) (webPaths, error) {
	var p webPaths
	if externalURL != "" {
		u, err := url.Parse(externalURL)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return p, fmt.Errorf("--web.external-url=%s: want an absolute http or https URL without a query or fragment, e.g. https://proxy.example/phe", externalURL)
		}
		p.external = strings.TrimRight(u.Path, "/")
	}
	p.route = p.external
	if routePrefix != "" {
		if !strings.HasPrefix(routePrefix, "/") || strings.ContainsAny(routePrefix, "?#{}") || strings.Contains(routePrefix, "//") {
			return p, fmt.Errorf("--web.route-prefix=%s: want a path starting with /, e.g. /phe (or / for the root)", routePrefix)
		}
		p.route = strings.TrimRight(routePrefix, "/")
	}
	return p, nil
}

// withRoutePrefix serves h under prefix: a request for <prefix>/x reaches h as /x; the root
// and the bare prefix redirect to <prefix>/, where the status page is; anything else is not
// found. An empty prefix serves h at the root.
func withRoutePrefix(h http.Handler, prefix string) http.Handler {
	if prefix == "" {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
	toPage := http.RedirectHandler(prefix+"/", http.StatusFound)
	mux.Handle("GET "+prefix, toPage)
	mux.Handle("GET /{$}", toPage)
	return mux
}
