package testutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Records parses the JSON log lines written so far (the exporter's --log.format=json).
func (s *SyncBuffer) Records() []map[string]any {
	var rs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	for sc.Scan() {
		var r map[string]any
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// Find returns the first JSON log record with the message, or nil.
func (s *SyncBuffer) Find(msg string) map[string]any {
	for _, r := range s.Records() {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

// Await waits up to d for a JSON log record with the message and returns it. A subprocess's
// log comes through a pipe, so a record written before an HTTP answer may be read after it.
func (s *SyncBuffer) Await(t testing.TB, d time.Duration, msg string) map[string]any {
	t.Helper()
	var r map[string]any
	Eventually(t, d, "the log record "+strconv.Quote(msg), func() bool {
		r = s.Find(msg)
		return r != nil
	})
	return r
}

// ListenAddress waits for exporter-toolkit's "Listening on" log record in logs and returns its
// address; exited reports whether the exporter has exited (then the test fails at once).
func ListenAddress(t testing.TB, logs *SyncBuffer, exited func() bool) string {
	t.Helper()
	var addr string
	Eventually(t, 20*time.Second, "the exporter to listen", func() bool {
		if r := logs.Find("Listening on"); r != nil {
			addr, _ = r["address"].(string)
			return true
		}
		if exited() {
			t.Fatalf("the exporter exited before listening; logs:\n%s", logs.String())
		}
		return false
	})
	return addr
}

// Metric returns the value of an unlabelled metric, or of the first series whose line starts
// with the given name and labels (e.g. `proxy_operator_provider_info{provider="a"`), in a
// /metrics text.
func Metric(t testing.TB, body, prefix string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, prefix) {
			continue
		}
		// Without labels in prefix, the name must end where prefix does: not a longer name.
		if rest := line[len(prefix):]; !strings.Contains(prefix, "{") && !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		return v, true
	}
	return 0, false
}

// TargetSeries returns the line of family name for target in a /metrics text, "" when none.
func TargetSeries(metrics, name, target string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, name+"{") && strings.Contains(l, `target="`+target+`"`) {
			return l
		}
	}
	return ""
}

// TargetReason returns target's current reason in a /metrics text, "" when it has none.
func TargetReason(metrics, target string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "proxy_operator_provider_target_reason{") && strings.Contains(l, `target="`+target+`"`) && strings.HasSuffix(l, " 1") {
			i := strings.Index(l, `reason="`)
			return strings.SplitN(l[i+len(`reason="`):], `"`, 2)[0]
		}
	}
	return ""
}

// Fetch GETs url with the headers (name, value pairs) and returns the status and body.
func Fetch(t testing.TB, client *http.Client, url string, headers ...string) (int, string) {
	t.Helper()
	return Request(t, client, http.MethodGet, url, headers...)
}

// Request sends a request without a body to url with the headers (name, value pairs) and
// returns the status and body.
func Request(t testing.TB, client *http.Client, method, url string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// ProbeSamples parses a /probe answer: the value of each series, keyed as name{labels}.
func ProbeSamples(t testing.TB, body string) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the answer is not the Prometheus text format: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := name
			for _, lp := range m.GetLabel() {
				key += fmt.Sprintf("{%s=%q}", lp.GetName(), lp.GetValue())
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}

// VerdictLines returns the provider verdict series of a /metrics answer.
func VerdictLines(body string) string {
	var keep []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "proxy_operator_provider_") && !strings.HasPrefix(line, "proxy_operator_provider_check_rounds") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
