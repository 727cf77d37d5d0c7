package kube

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricsReadLimit bounds a /metrics answer read from etcd or the API server.
const metricsReadLimit = 64 << 20

// Metrics is one reading of a server's /metrics, by family name.
type Metrics map[string]*dto.MetricFamily

// EtcdMetrics reads etcd's own /metrics (served on its client URL): what it received and wrote,
// e.g. etcd_network_client_grpc_received_bytes_total and etcd_disk_wal_write_bytes_total.
func (e *Env) EtcdMetrics() (Metrics, error) {
	e.mu.Lock()
	url := e.etcdURL
	e.mu.Unlock()
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	return readMetrics(&http.Client{Timeout: 30 * time.Second}, req)
}

// APIServerMetrics reads the kube-apiserver's /metrics as the admin: what it answered, e.g.
// apiserver_response_sizes (GET and LIST answers) and apiserver_watch_events_sizes (watch
// events), both by resource.
func (e *Env) APIServerMetrics() (Metrics, error) {
	req, err := http.NewRequest(http.MethodGet, e.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	return readMetrics(e.httpClient(30*time.Second), req)
}

func readMetrics(hc *http.Client, req *http.Request) (Metrics, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, metricsReadLimit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	if len(body) > metricsReadLimit {
		return nil, fmt.Errorf("%s: more than %d bytes", req.URL, metricsReadLimit)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	return Metrics(fams), nil
}

// Sum adds up the samples of a family whose labels have the values labels gives (name, value
// pairs): the values of a counter, gauge or untyped family, or, for name_sum and name_count of
// a histogram or summary family name, the sums or counts of its observations. A family the
// reading lacks sums to 0.
func (m Metrics) Sum(name string, labels ...string) float64 {
	fam, part := m[name], ""
	if fam == nil {
		for _, suffix := range []string{"_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && m[base] != nil {
				fam, part = m[base], suffix
			}
		}
	}
	if fam == nil {
		return 0
	}
	var sum float64
	for _, s := range fam.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Untyped != nil:
			sum += s.GetUntyped().GetValue()
		case s.Histogram != nil && part == "_sum":
			sum += s.GetHistogram().GetSampleSum()
		case s.Histogram != nil && part == "_count":
			sum += float64(s.GetHistogram().GetSampleCount())
		case s.Summary != nil && part == "_sum":
			sum += s.GetSummary().GetSampleSum()
		case s.Summary != nil && part == "_count":
			sum += float64(s.GetSummary().GetSampleCount())
		}
	}
	return sum
}

// hasLabels reports whether the sample has every name, value pair of labels.
func hasLabels(s *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
