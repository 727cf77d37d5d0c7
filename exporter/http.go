package exporter

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler routes the exporter's HTTP endpoints, behind the security headers and the refusal of
// cross-origin requests that change state (guard, webguard.go). exporter-toolkit wraps it with
// TLS and basic auth when --web.config.file asks for them.
func (e *Exporter) Handler() http.Handler {
	mux := http.NewServeMux()
	// The registry's families and the snapshot's; promhttp negotiates, encodes and compresses.
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(e.registry,
		promhttp.HandlerFor(e.providerMetrics.With(e.registry), promhttp.HandlerOpts{
			ErrorLog:          promhttpLogger{e},
			EnableOpenMetrics: true,
			// A scrape reads only the last snapshot, so it is quick; bound the concurrency
			// anyway so that a flood of scrapes cannot pile up.
			MaxRequestsInFlight: 10,
		})))
	// One check of one target now (blackbox's multi-target convention); see probe.go.
	mux.Handle("GET /probe", newProbeHandler(e, 0))
	mux.HandleFunc("GET /{$}", e.serveLanding)
	// What the status page shows, as JSON (api.go, docs/api.md).
	mux.HandleFunc("GET /api/v1/status", e.serveStatusAPI)
	mux.HandleFunc("GET /-/healthy", e.serveHealthy)
	mux.HandleFunc("GET /-/ready", e.serveReady)
	// Other methods get 405 from the mux: a reload changes state, so GET must not trigger it.
	mux.HandleFunc("POST /-/reload", e.serveReload)
	return guard(mux)
}

// serveHealthy answers as long as the process serves HTTP.
func (e *Exporter) serveHealthy(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "Healthy")
}

// serveReady answers 200 once the first round of checks has finished (at once when checks are
// off), so that a rollout does not send scrapes to an exporter with no verdicts yet.
func (e *Exporter) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if e.ready() {
		fmt.Fprintln(w, "Ready")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintln(w, "Not ready: the first round of checks has not finished")
}

// ready reports whether the first round of checks has finished, or checks are off.
func (e *Exporter) ready() bool {
	if !e.ChecksOn() {
		return true
	}
	select {
	case <-e.runner.FirstRound():
		return true
	default:
		return false
	}
}

// serveReload re-reads the providers file; a failure answers 500 with the reason. Without
// --web.enable-lifecycle it answers 403, as Prometheus does.
func (e *Exporter) serveReload(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !e.Lifecycle {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintln(w, "Lifecycle API is not enabled: start the exporter with --web.enable-lifecycle (SIGHUP reloads without it)")
		return
	}
	if err := e.Reload(); err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "failed to reload %s:\n%v\n", e.configFile, err)
		return
	}
	fmt.Fprintln(w, "Reloaded")
}

// promhttpLogger sends promhttp's errors (a collector failing during a scrape) to the logger.
type promhttpLogger struct{ e *Exporter }

func (l promhttpLogger) Println(v ...any) {
	l.e.logger.Error("serving metrics", "err", fmt.Sprint(v...))
}
