package vsphere_test

import (
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestEndlessAnswer: an endpoint that answers every SOAP call with a 200 and a body that never
// ends (written as fast as it is read) gives APIError naming the cut, long before the check's
// deadline, and the heap stays flat: every answer of the session's transport, the inventory's
// host lists included, is cut at checks.MaxAnswerSize.
func TestEndlessAnswer(t *testing.T) {
	srv := httptest.NewUnstartedServer(testutil.EndlessBody("text/xml; charset=utf-8", `<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><x>`))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	writeFile(t, filepath.Join(dir, "user"), "checker")
	writeFile(t, filepath.Join(dir, "password"), "endless-password")
	c := newChecker(t, &vsphere.Config{URL: srv.URL + "/sdk", UsernameFile: filepath.Join(dir, "user"),
		PasswordFile: filepath.Join(dir, "password"), CAFile: caFile})

	const deadline = 30 * time.Second
	var r checks.TargetResult
	var took time.Duration
	peak := testutil.PeakHeap(t, func() {
		start := time.Now()
		r = check(t, c, deadline)
		took = time.Since(start)
	})
	want(t, r, checks.ReasonAPIError, "larger than 4 MiB")
	if took >= deadline {
		t.Errorf("the check ran out its %s deadline: the body was not cut by size", deadline)
	}
	if peak > 200<<20 {
		t.Errorf("heap in use peaked at %d MiB during the check, want under 200 MiB", peak>>20)
	}
}
