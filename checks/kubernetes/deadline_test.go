package kubernetes

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// TestCutAtTheDeadline: an API server that accepts the list request and never answers gives
// Timeout at the check's deadline (plus at most the runner's largest grace, 500ms), and the
// request is abandoned, not left running on the server.
func TestCutAtTheDeadline(t *testing.T) {
	var requests, stalled atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		stalled.Add(1)
		select {
		case <-r.Context().Done(): // the client went away: the request was cut
			stalled.Add(-1)
		case <-release:
			stalled.Add(-1)
			return
		}
		// Hold on until the test ends: returning now would send a 200 with an empty body,
		// which the client may still read while it closes the connection at its deadline.
		<-release
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close: no handler keeps it waiting

	c := newChecker(t, provider("stall", writeKubeconfig(t, srv.URL, serverCA(srv), "stall", "token-abcdef"), ""), nil)
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	r := checkOnce(t, c, ctx)
	elapsed := time.Since(start)
	if r.Reason != checks.ReasonTimeout || !strings.Contains(r.Message, "deadline") {
		t.Errorf("reason %s (%q), want Timeout at the deadline", r.Reason, r.Message)
	}
	if elapsed > deadline+500*time.Millisecond {
		t.Errorf("Check returned after %v with a %v deadline", elapsed, deadline)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests reached the server, want 1", n)
	}
	// The cut request's connection closes, which ends the handler's wait.
	for stalled.Load() != 0 && time.Since(start) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if n := stalled.Load(); n != 0 {
		t.Errorf("%d request(s) still held at the server %v after the deadline: the request was not cut", n, time.Since(start))
	}
}
