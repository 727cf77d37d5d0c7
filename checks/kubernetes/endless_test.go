package kubernetes

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestEndlessAnswer: an API server that answers the list with a 200 and a body that never ends
// (as fast as it can write) gives APIError naming the cut, well within the round's deadline,
// and the process's memory stays flat (the body is cut at checks.MaxAnswerSize).
func TestEndlessAnswer(t *testing.T) {
	srv := httptest.NewUnstartedServer(testutil.EndlessBody("application/json", `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[{"metadata":{"name":"`))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	c := newChecker(t, provider("endless", writeKubeconfig(t, srv.URL, serverCA(srv), "endless", "token-abcdef"), ""), nil)
	const deadline = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var r checks.TargetResult
	peak := testutil.PeakHeap(t, func() { r = checkOnce(t, c, ctx) })
	if r.Reason != checks.ReasonAPIError || !strings.Contains(r.Message, "larger than 4 MiB") {
		t.Errorf("reason %s (%q), want APIError saying the answer was cut", r.Reason, r.Message)
	}
	if ctx.Err() != nil {
		t.Errorf("the check ran out its %s deadline: the body was not cut by size", deadline)
	}
	if peak > 200<<20 {
		t.Errorf("heap in use peaked at %d MiB during the check, want under 200 MiB", peak>>20)
	}
	t.Logf("verdict %s after %s; heap in use peaked at %d MiB", r.Reason, r.Duration, peak>>20)
	if checks.MaxAnswerSize > 16<<20 {
		t.Errorf("MaxAnswerSize %d: more than a list of one object needs", checks.MaxAnswerSize)
	}
}
