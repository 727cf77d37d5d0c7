package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestProbeSharedChecks is the reproduction: 50 callers probing one gcp provider at
// once for 10 s sent 399-484 instance-list requests to the GCE API, and a kubernetes provider
// the same to its API server. Now 50 callers probing each for a few seconds, every probe
// answered probe_success 1, make at most one check per --web.probe-min-interval (plus the one
// running when the callers stop), counted where the requests arrive: the GCE wire server's
// instance-list requests and the real API server's audit log. The callers send
// X-Prometheus-Scrape-Timeout-Seconds: 1e300, which used to fail every healthy target.
func TestProbeSharedChecks(t *testing.T) {
	env := kube.Start(t)
	const kubeUser = "phe-probe-shared"
	env.AddUser(kubeUser, "system:masters")
	gce := gcefake.Start(t)
	key := gce.ServiceAccountKey(t)
	e, srv := startProbeExporter(t, fmt.Sprintf(`providers:
  - name: cluster
    type: kubernetes
    kubernetes:
      kubeconfig: %s
  - name: gce
    type: gcp
    gcp:
      project: %s
      credentialsFile: %s
      endpoint: %s
`, env.KubeconfigFor(kubeUser), gcefake.DefaultProject, key, gce.URL()), time.Hour, 15*time.Second)
	const minInterval = time.Second
	e.ProbeMinInterval = minInterval
	client := &http.Client{Timeout: 30 * time.Second}
	_, body := testutil.Fetch(t, client, srv.URL+"/probe?provider=cluster&target=nope")
	m := regexp.MustCompile(`its targets: "([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the unknown-target answer does not list the kubernetes target: %q", body)
	}
	kubeLists := func() int {
		return env.CountRequests(t, func(ev kube.AuditEvent) bool { return ev.User == kubeUser && ev.Verb == "list" })
	}

	for _, c := range []struct {
		provider, target string
		requests         func() int
		what             string
	}{
		{"gce", gcefake.DefaultProject, gce.InstancesRequests, "instance-list requests to the GCE wire server"},
		{"cluster", m[1], kubeLists, "LIST requests to the API server (its audit log)"},
	} {
		const callers = 50
		const duration = 3 * time.Second
		before := c.requests()
		start := time.Now()
		var probes, bad atomic.Int64
		var firstBad atomic.Value
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < duration {
					req, _ := http.NewRequest(http.MethodGet, srv.URL+"/probe?provider="+c.provider+"&target="+c.target, nil)
					req.Header.Set(prometheusScrapeTimeout, "1e300")
					resp, err := client.Do(req)
					probes.Add(1)
					if err != nil {
						bad.Add(1)
						firstBad.CompareAndSwap(nil, err.Error())
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if s := testutil.ProbeSamples(t, string(b)); resp.StatusCode != http.StatusOK || s["probe_success"] != 1 {
						bad.Add(1)
						firstBad.CompareAndSwap(nil, fmt.Sprintf("%d %q", resp.StatusCode, b))
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		n := c.requests() - before
		most := int(elapsed/minInterval) + 2
		t.Logf("%s: %d probes by %d callers in %s made %d %s (at most %d allowed)", c.provider, probes.Load(), callers, elapsed.Round(time.Millisecond), n, c.what, most)
		if bad.Load() > 0 {
			t.Errorf("%s: %d of %d probes did not answer 200 probe_success 1; the first: %v", c.provider, bad.Load(), probes.Load(), firstBad.Load())
		}
		if n < 1 || n > most {
			t.Errorf("%s: %d callers probing for %s made %d %s, want 1 to %d (one per --web.probe-min-interval %s, plus the one running)",
				c.provider, callers, elapsed.Round(time.Millisecond), n, c.what, most, minInterval)
		}
		if probes.Load() < callers {
			t.Errorf("%s: only %d probes answered", c.provider, probes.Load())
		}
	}
}
