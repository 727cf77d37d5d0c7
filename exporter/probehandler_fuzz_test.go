package exporter

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// FuzzProbeRequest feeds /probe's query and scrape-timeout header to their parser: it never
// panics, a parsed request's deadline is positive and at most the round timeout, and an error
// stays short whatever was sent. Its seed corpus is in testdata/fuzz/FuzzProbeRequest.
func FuzzProbeRequest(f *testing.F) {
	f.Add("provider=p&target=t", "10")
	f.Add("provider=p&target=t&timeout=2s&debug=true", "1e300")
	f.Add("provider=p&target=t&timeout=1e300", "NaN")
	f.Add("target=t&debug=maybe", "-Inf")
	f.Fuzz(func(t *testing.T, query, header string) {
		e := &Exporter{timeout: 15 * time.Second}
		r := httptest.NewRequest(http.MethodGet, "/probe", nil)
		r.URL.RawQuery = query
		r.Header.Set(scrapeTimeoutHeader, header)
		pr, err := e.parseProbeRequest(r)
		if err != nil {
			if len(err.Error()) > 400 {
				t.Fatalf("an error of %d bytes for a query of %d and a header of %d", len(err.Error()), len(query), len(header))
			}
			return
		}
		if pr.deadline.timeout <= 0 || pr.deadline.timeout > 15*time.Second {
			t.Fatalf("deadline %s (%s), want within (0, 15s]", pr.deadline.timeout, pr.deadline.why)
		}
		if len(pr.deadline.why) > 600 {
			t.Fatalf("a deadline's explanation of %d bytes", len(pr.deadline.why))
		}
	})
}
