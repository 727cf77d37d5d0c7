package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/exporter"
)

const (
	// defaultWriteTimeout is the least derived --web.write-timeout: a first scrape after a
	// round costs about 134 ms of CPU per 10,000 targets on a loaded machine
	// (docs/benchmarks.md), about 1.4 s at the 100,000-target ceiling of a provider, so two
	// minutes cuts only a client that stopped reading.
	defaultWriteTimeout = 2 * time.Minute
	// writeTimeoutMargin is added to the check timeout when that derives the write timeout:
	// a /probe may check for the whole check timeout, then writes its answer.
	writeTimeoutMargin = 30 * time.Second
	// defaultIdleTimeout is --web.idle-timeout's default: longer than any scrape interval a
	// Prometheus keeps its connection alive over (1m is the common longest), so scrapes reuse
	// their connection.
	defaultIdleTimeout = 2 * time.Minute
	// readHeaderTimeout bounds the reading of a request's headers (a client that sends them
	// byte by byte holds no connection for long).
	readHeaderTimeout = 10 * time.Second
)

// newHTTPServer is the exporter's HTTP server: every stage of a connection bounded (headers
// read, answer written, keep-alive wait), and the security headers outermost, around the
// layers exporter-toolkit adds (exporter.HeadersOutermost). checkTimeout is the check timeout
// in effect (a /probe may take that long).
func newHTTPServer(opts *options, checkTimeout time.Duration, handler http.Handler, logger *slog.Logger) *http.Server {
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout(opts.writeTimeout, checkTimeout),
		IdleTimeout:       opts.idleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
	}
	exporter.HeadersOutermost(server)
	return server
}

// writeTimeout is --web.write-timeout in effect: as given, or when 0 the longer of
// defaultWriteTimeout and the check timeout plus writeTimeoutMargin.
func writeTimeout(flag, checkTimeout time.Duration) time.Duration {
	if flag > 0 {
		return flag
	}
	return max(defaultWriteTimeout, checkTimeout+writeTimeoutMargin)
}

// checkWebTimeouts refuses a negative --web.write-timeout, a non-positive --web.idle-timeout,
// and a write timeout that would cut a /probe's answer (not longer than the check timeout).
func checkWebTimeouts(opts *options) error {
	var errs []error
	if opts.writeTimeout < 0 {
		errs = append(errs, fmt.Errorf("--web.write-timeout=%s: must not be negative (0 derives it)", opts.writeTimeout))
	}
	if opts.idleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--web.idle-timeout=%s: must be positive", opts.idleTimeout))
	}
	if opts.writeTimeout > 0 && opts.timeout > 0 && opts.writeTimeout <= opts.timeout {
		errs = append(errs, fmt.Errorf("--web.write-timeout=%s: must be longer than --provider-check-timeout (%s), or a /probe's answer is cut", opts.writeTimeout, opts.timeout))
	}
	return errors.Join(errs...)
}
