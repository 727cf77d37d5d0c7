package exporter

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/exporter/status"
)

// GET /api/v1/status answers the status model (exporter/status) as JSON (docs/api.md): the
// status page's filters (provider, state, reason, label), order and pages of at most
// status.PageRows targets, in Prometheus's HTTP API envelope ({"status": "success", "data":
// ...}, or "error" with errorType and error). The field names are a stable interface: the
// golden files of testdata/status/ and api_test.go pin them; a change that removes or renames
// one needs a new version of the path.

type apiResponse struct {
	Status    string         `json:"status"`
	Data      *status.Status `json:"data,omitempty"`
	ErrorType string         `json:"errorType,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// serveStatusAPI answers GET /api/v1/status, sharing the status page's bound on renders in
// flight.
func (e *Exporter) serveStatusAPI(w http.ResponseWriter, r *http.Request) {
	select {
	case e.landingSlots <- struct{}{}:
		defer func() { <-e.landingSlots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeAPI(w, http.StatusServiceUnavailable, apiResponse{Status: "error", ErrorType: "unavailable",
			Error: fmt.Sprintf("too many renders of the status in flight (at most %d): retry in a moment", cap(e.landingSlots))})
		return
	}
	e.renderStatusAPI(w, r, e.runner.Current(), time.Now())
}

// renderStatusAPI answers the status of snapshot s, filtered by r's query.
func (e *Exporter) renderStatusAPI(w http.ResponseWriter, r *http.Request, s *checks.Snapshot, now time.Time) {
	f, err := status.ParseFilterQuery(r.URL.RawQuery)
	if err != nil {
		writeAPI(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
		return
	}
	writeAPI(w, http.StatusOK, apiResponse{Status: "success", Data: e.statusOf(s, f)})
}

func writeAPI(w http.ResponseWriter, code int, resp apiResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(resp)
}
