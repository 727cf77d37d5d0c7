package promstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pollInterval is how often the Wait helpers ask again.
const pollInterval = 100 * time.Millisecond

// Sample is one element of an instant query's result.
type Sample struct {
	Labels    map[string]string
	Value     float64
	Timestamp time.Time
}

// String renders the sample like Prometheus's UI: {a="b"} => 1.
func (s Sample) String() string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, s.Labels[k])
	}
	fmt.Fprintf(&b, "} => %g", s.Value)
	return b.String()
}

// apiResponse is the envelope of every Prometheus /api/v1 answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
}

// promAPI calls a Prometheus /api/v1 endpoint and returns its data field.
func (s *Stack) promAPI(ctx context.Context, method, path string, form url.Values) (json.RawMessage, error) {
	var body io.Reader
	u := s.PrometheusURL + path
	if method == http.MethodPost {
		body = strings.NewReader(form.Encode())
	} else if len(form) > 0 {
		u += "?" + form.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("build request %s: %w", path, err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read prometheus %s answer: %w", path, err)
	}
	var r apiResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("prometheus %s: HTTP %d, undecodable answer %q: %w", path, resp.StatusCode, truncate(raw), err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("prometheus %s: HTTP %d, %s: %s", path, resp.StatusCode, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// Query evaluates an instant PromQL query now. Vector results give one Sample per series, a
// scalar gives one Sample without labels; other result types are an error.
func (s *Stack) Query(ctx context.Context, promql string) ([]Sample, error) {
	data, err := s.promAPI(ctx, http.MethodPost, "/api/v1/query", url.Values{"query": {promql}})
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", promql, err)
	}
	samples, err := decodeQueryData(data)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", promql, err)
	}
	return samples, nil
}

// Series is one series of a range query's result: its labels and its points, oldest first.
type Series struct {
	Labels map[string]string
	Points []Point
}

// Point is one value of a Series.
type Point struct {
	T time.Time
	V float64
}

// QueryRange evaluates promql at every step from start to end, as Prometheus's graphs do: a
// series has a point at each step where it has a sample within the lookback and no
// staleness marker (a scrape target gone or failing, a rule's output without it) since.
func (s *Stack) QueryRange(ctx context.Context, promql string, start, end time.Time, step time.Duration) ([]Series, error) {
	form := url.Values{
		"query": {promql},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', 3, 64)},
	}
	data, err := s.promAPI(ctx, http.MethodPost, "/api/v1/query_range", form)
	if err != nil {
		return nil, fmt.Errorf("query range %q: %w", promql, err)
	}
	series, err := decodeMatrix(data)
	if err != nil {
		return nil, fmt.Errorf("query range %q: %w", promql, err)
	}
	return series, nil
}

func decodeMatrix(data json.RawMessage) ([]Series, error) {
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("decode query data: %w", err)
	}
	if d.ResultType != "matrix" {
		return nil, fmt.Errorf("result type %q, want matrix", d.ResultType)
	}
	out := make([]Series, 0, len(d.Result))
	for _, r := range d.Result {
		se := Series{Labels: r.Metric, Points: make([]Point, 0, len(r.Values))}
		for _, v := range r.Values {
			ts, val, err := decodePoint(v)
			if err != nil {
				return nil, err
			}
			se.Points = append(se.Points, Point{T: ts, V: val})
		}
		out = append(out, se)
	}
	return out, nil
}

func decodeQueryData(data json.RawMessage) ([]Sample, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("decode query data: %w", err)
	}
	switch d.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vec); err != nil {
			return nil, fmt.Errorf("decode vector: %w", err)
		}
		out := make([]Sample, 0, len(vec))
		for _, v := range vec {
			ts, val, err := decodePoint(v.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Labels: v.Metric, Value: val, Timestamp: ts})
		}
		return out, nil
	case "scalar":
		var p [2]any
		if err := json.Unmarshal(d.Result, &p); err != nil {
			return nil, fmt.Errorf("decode scalar: %w", err)
		}
		ts, val, err := decodePoint(p)
		if err != nil {
			return nil, err
		}
		return []Sample{{Labels: map[string]string{}, Value: val, Timestamp: ts}}, nil
	default:
		return nil, fmt.Errorf("result type %q: only vector and scalar are supported", d.ResultType)
	}
}

// decodePoint decodes Prometheus's [unix seconds, "value"] pair; the value is a string so
// that NaN and ±Inf survive JSON.
func decodePoint(p [2]any) (time.Time, float64, error) {
	sec, ok := p[0].(float64)
	if !ok {
		return time.Time{}, 0, fmt.Errorf("sample timestamp %v is not a number", p[0])
	}
	str, ok := p[1].(string)
	if !ok {
		return time.Time{}, 0, fmt.Errorf("sample value %v is not a string", p[1])
	}
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("sample value %q: %w", str, err)
	}
	return time.UnixMilli(int64(sec * 1000)), v, nil
}

// WaitForQuery evaluates promql until cond accepts its result, and returns that result. It
// fails the test after timeout, showing the last result or error.
func (s *Stack) WaitForQuery(tb testing.TB, promql string, cond func([]Sample) bool, timeout time.Duration) []Sample {
	tb.Helper()
	var last []Sample
	var lastErr error
	ok := poll(timeout, func(ctx context.Context) bool {
		last, lastErr = s.Query(ctx, promql)
		return lastErr == nil && cond(last)
	})
	if !ok {
		tb.Fatalf("query %q: condition not met within %v; last error: %v; last result: %v", promql, timeout, lastErr, last)
	}
	return last
}

// Target is one active scrape target.
type Target struct {
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Labels     map[string]string `json:"labels"`
	// Health is "up", "down" or "unknown" (not scraped yet).
	Health             string    `json:"health"`
	LastError          string    `json:"lastError"`
	LastScrape         time.Time `json:"lastScrape"`
	LastScrapeDuration float64   `json:"lastScrapeDuration"`
}

// Instance is the target's instance label (its host:port unless relabelled).
func (t Target) Instance() string { return t.Labels["instance"] }

// Targets lists Prometheus's active scrape targets.
func (s *Stack) Targets(ctx context.Context) ([]Target, error) {
	data, err := s.promAPI(ctx, http.MethodGet, "/api/v1/targets", url.Values{"state": {"active"}})
	if err != nil {
		return nil, err
	}
	var d struct {
		ActiveTargets []Target `json:"activeTargets"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("decode targets: %w", err)
	}
	return d.ActiveTargets, nil
}

// WaitTargetUp waits until the target whose instance is target (host:port) has been scraped
// successfully, and returns it. It fails the test after timeout with the target's last error.
func (s *Stack) WaitTargetUp(tb testing.TB, target string, timeout time.Duration) Target {
	tb.Helper()
	var last []Target
	var lastErr error
	var found Target
	ok := poll(timeout, func(ctx context.Context) bool {
		last, lastErr = s.Targets(ctx)
		for _, t := range last {
			if t.Instance() == target && t.Health == "up" {
				found = t
				return true
			}
		}
		return false
	})
	if !ok {
		tb.Fatalf("target %s not up within %v; last error: %v; targets: %+v", target, timeout, lastErr, last)
	}
	return found
}

// Alert is an alert as Alertmanager's /api/v2/alerts lists it.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	UpdatedAt    time.Time         `json:"updatedAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
	Status       struct {
		// State is "active", "suppressed" or "unprocessed".
		State       string   `json:"state"`
		SilencedBy  []string `json:"silencedBy"`
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status"`
	Receivers []struct {
		Name string `json:"name"`
	} `json:"receivers"`
}

// Name is the alert's alertname label.
func (a Alert) Name() string { return a.Labels["alertname"] }

// Alerts lists the alerts Alertmanager holds (active, suppressed and unprocessed).
func (s *Stack) Alerts(ctx context.Context) ([]Alert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.AlertmanagerURL+"/api/v2/alerts", nil)
	if err != nil {
		return nil, fmt.Errorf("build alerts request: %w", err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("alertmanager alerts: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read alertmanager alerts: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("alertmanager alerts: HTTP %d: %s", resp.StatusCode, truncate(raw))
	}
	var alerts []Alert
	if err := json.Unmarshal(raw, &alerts); err != nil {
		return nil, fmt.Errorf("decode alertmanager alerts: %w", err)
	}
	return alerts, nil
}

// WaitForAlert waits until Alertmanager holds an active alert named alertname, and returns it.
func (s *Stack) WaitForAlert(tb testing.TB, alertname string, timeout time.Duration) Alert {
	tb.Helper()
	var last []Alert
	var lastErr error
	var found Alert
	ok := poll(timeout, func(ctx context.Context) bool {
		last, lastErr = s.Alerts(ctx)
		for _, a := range last {
			if a.Name() == alertname && a.Status.State == "active" {
				found = a
				return true
			}
		}
		return false
	})
	if !ok {
		names := make([]string, 0, len(last))
		for _, a := range last {
			names = append(names, a.Name()+"("+a.Status.State+")")
		}
		tb.Fatalf("alert %s not active in alertmanager within %v; last error: %v; alerts: %v", alertname, timeout, lastErr, names)
	}
	return found
}

// PostableAlert is an alert pushed straight to Alertmanager, as a Prometheus would send it.
type PostableAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// StartsAt defaults to now on Alertmanager's side; a zero EndsAt keeps the alert firing
	// for Alertmanager's resolve_timeout (5m).
	StartsAt     time.Time `json:"startsAt,omitzero"`
	EndsAt       time.Time `json:"endsAt,omitzero"`
	GeneratorURL string    `json:"generatorURL,omitempty"`
}

// PostAlert pushes alerts to Alertmanager's /api/v2/alerts.
func (s *Stack) PostAlert(ctx context.Context, alerts ...PostableAlert) error {
	body, err := json.Marshal(alerts)
	if err != nil {
		return fmt.Errorf("encode alerts: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.AlertmanagerURL+"/api/v2/alerts", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build post alerts request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("post alerts: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post alerts: HTTP %d: %s", resp.StatusCode, truncate(raw))
	}
	return nil
}

// ReloadPrometheus asks Prometheus to re-read its configuration and rule files. A bad
// configuration is an error; Prometheus then keeps the previous one.
func (s *Stack) ReloadPrometheus(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.PrometheusURL+"/-/reload", nil)
	if err != nil {
		return fmt.Errorf("build reload request: %w", err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("reload prometheus: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reload prometheus: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(truncate(raw))))
	}
	return nil
}

// Reconfigure rewrites prometheus.yml from opts (scrape and rule settings; the Alertmanager
// settings of Start stay) and reloads Prometheus.
func (s *Stack) Reconfigure(ctx context.Context, opts Options) error {
	if err := s.writePrometheusConfig(opts.withDefaults()); err != nil {
		return err
	}
	return s.ReloadPrometheus(ctx)
}

// poll calls try every pollInterval until it returns true or timeout passes; each call gets a
// context bounded by what is left of the timeout (and at least a second).
func poll(timeout time.Duration, try func(ctx context.Context) bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		// The last attempt may start just before the deadline: give each at least a second
		// so the failure message shows a real answer rather than a timeout of its own.
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(deadline), time.Second))
		ok := try(ctx)
		cancel()
		if ok {
			return true
		}
		if time.Until(deadline) <= 0 {
			return false
		}
		time.Sleep(min(pollInterval, time.Until(deadline)))
	}
}

func truncate(b []byte) []byte {
	const max = 2048
	if len(b) > max {
		return append(b[:max:max], "..."...)
	}
	return b
}

// RuleGroup is one rule group as Prometheus's /api/v1/rules lists it.
type RuleGroup struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Interval is the group's evaluation interval in seconds.
	Interval       float64   `json:"interval"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// RuleGroups lists Prometheus's rule groups. Prometheus places each group at a fixed offset
// within its interval, from a hash of the group's name and file: LastEvaluation modulo the
// interval shows where.
func (s *Stack) RuleGroups(ctx context.Context) ([]RuleGroup, error) {
	data, err := s.promAPI(ctx, http.MethodGet, "/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Groups []RuleGroup `json:"groups"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("decode rule groups: %w", err)
	}
	return d.Groups, nil
}
