package exporter

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultListenAddress is --web.listen-address's default. 9847 is not the port of any widely
// deployed exporter we know of. The range the Prometheus default-port-allocations list hands out
// (9100-9999) is fully taken, so the port is not registered there: where it clashes,
// --web.listen-address moves it. The image's EXPOSE follows it (package release checks).
const DefaultListenAddress = ":9847"

// Handler routes the exporter's HTTP endpoints at the root, behind Guard. exporter-toolkit wraps
// it with TLS and basic auth when --web.config.file asks for them.
func (e *Exporter) Handler() http.Handler { return Guard(e.Routes()) }

// Routes routes the exporter's HTTP endpoints without Guard: for a server that puts them under a
// path of its own (--web.route-prefix) and wraps the whole, its own redirects and 404s
// included, in Guard.
func (e *Exporter) Routes() http.Handler {
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
	// One check of one target now (blackbox's multi-target convention); see probehandler.go.
	mux.Handle("GET /probe", newProbeHandler(e, 0))
	mux.HandleFunc("GET /{$}", e.serveLanding)
	// What the status page shows, as JSON (api.go, docs/api.md).
	mux.HandleFunc("GET /api/v1/status", e.serveStatusAPI)
	mux.HandleFunc("GET /-/healthy", e.serveHealthy)
	mux.HandleFunc("GET /-/ready", e.serveReady)
	// Other methods get 405 from the mux: a reload changes state, so GET must not trigger it.
	mux.HandleFunc("POST /-/reload", e.serveReload)
	return mux
}

// serveHealthy answers as long as the process serves HTTP.
func (e *Exporter) serveHealthy(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "Healthy")
}

// serveReady answers 200 while the exporter can do rounds of checks (see notReady), so that
// a rollout does not send scrapes to an exporter with no verdicts yet, nor a load balancer to
// one whose rounds stopped.
func (e *Exporter) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why := e.notReady(time.Now()); why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "Not ready: "+why)
		return
	}
	fmt.Fprintln(w, "Ready")
}

// notReady says why the exporter cannot do a round now, "" when it can: it is shutting down;
// Readiness says why; the first round has not finished; or no round has started for longer than
// stalledAfter (a round, or the reads before it, cannot complete). With checks off it is
// ready at once, until it shuts down.
func (e *Exporter) notReady(now time.Time) string {
	if e.stopping.Load() {
		return "the exporter is shutting down"
	}
	if !e.ChecksOn() {
		return ""
	}
	if e.Readiness != nil {
		if err := e.Readiness(); err != nil {
			return err.Error()
		}
	}
	select {
	case <-e.runner.FirstRound():
	default:
		return "the first round of checks has not finished"
	}
	started := time.Unix(0, e.roundStarted.Load())
	if late := now.Sub(started); late > e.stalledAfter() {
		return fmt.Sprintf("no round of checks has started for %s (the last started at %s; one starts every %s)",
			late.Round(time.Second), started.UTC().Format(time.RFC3339), e.interval)
	}
	return ""
}

// stalledAfter is how long after a round's start the next one must have started: an interval
// for the round itself, another for a round that overran it (rounds never overlap; the next
// starts at the following tick), and the round's deadline.
func (e *Exporter) stalledAfter() time.Duration { return 2*e.interval + e.timeout }

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
