package mixin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The cost of the availability rules on a real Prometheus, side by side with the rules this
// mixin shipped before (docs/benchmarks.md). Heavy (tens of GB-seconds of CPU, a 5 GB input
// file): run by `make bench`, never by make test.
var (
	availabilityCost        = flag.Bool("availability.cost", false, "run TestAvailabilityCost (make bench)")
	availabilityCostTargets = flag.Int("availability.cost.targets", 1000, "targets of TestAvailabilityCost")
)

// availabilityRulesBefore are the availability rules as shipped before observed time and
// hourly buckets (one sample per target per minute, windows read from those samples), with
// their recorded names prefixed before_ so that they run beside the current ones.
const availabilityRulesBefore = `groups:
- interval: 1m
  name: before.availability-samples
  rules:
  - expr: max by (job, provider, target) (proxy_operator_provider_target_up{job="phe"})
    record: before_provider_target:proxy_operator_provider_target_up:max
- interval: 5m
  name: before.availability
  rules:
  - expr: clamp_max(sum_over_time(before_provider_target:proxy_operator_provider_target_up:max{job="phe"}[1d] offset 1m) / 1440, 1)
    record: before_provider_target:proxy_operator_provider_target_up:availability1d
  - expr: clamp_max(sum_over_time(before_provider_target:proxy_operator_provider_target_up:max{job="phe"}[7d] offset 1m) / 10080, 1)
    record: before_provider_target:proxy_operator_provider_target_up:availability7d
  - expr: clamp_max(sum_over_time(before_provider_target:proxy_operator_provider_target_up:max{job="phe"}[30d] offset 1m) / 43200, 1)
    record: before_provider_target:proxy_operator_provider_target_up:availability30d
  - expr: avg by (job, provider) (before_provider_target:proxy_operator_provider_target_up:availability1d{job="phe"})
    record: before_provider:proxy_operator_provider_target_up:availability1d
  - expr: avg by (job, provider) (before_provider_target:proxy_operator_provider_target_up:availability7d{job="phe"})
    record: before_provider:proxy_operator_provider_target_up:availability7d
  - expr: avg by (job, provider) (before_provider_target:proxy_operator_provider_target_up:availability30d{job="phe"})
    record: before_provider:proxy_operator_provider_target_up:availability30d
`

// costProviders is how many providers the targets are spread over.
const costProviders = 10

// TestAvailabilityCost backfills 30 days (and an hour) of what each set of rules reads for
// -availability.cost.targets targets (promtool tsdb create-blocks-from openmetrics): for the
// rules before, one sample per target per minute; for the current ones, the hourly buckets
// per target and provider, 7 hours of the per-provider minute series and 2 hours of the
// exporter's own series at the 30s scrape interval. It then starts Prometheus with both rule
// files (the current ones rendered with jobSelector job="phe"), scraping a stand-in exporter
// that serves every target up, and reports, per rule group, the samples its rules' queries
// read (totalQueryableSamples of the query API's stats=all, each expression run at the same
// instant) and the group's evaluation time from /api/v1/rules. The hourly buckets group runs
// once an hour; a copy of it at 1m (recording under other names) gives its evaluation time.
//
// It asserts no timing, only that each set of rules computes what it should from the
// backfilled data and the read counts the design promises (the 30d windows read at most 720
// samples per series).
func TestAvailabilityCost(t *testing.T) {
	if !*availabilityCost {
		t.Skip("skipped: heavy; run with -availability.cost (make bench)")
	}
	bins := promBinaries(t)
	prom, pt := bins[0], bins[1]
	n := *availabilityCostTargets
	dir := t.TempDir()

	end := time.Now().Truncate(time.Minute).Add(-time.Minute)
	start := end.Add(-30*24*time.Hour - time.Hour)
	input := filepath.Join(dir, "input.om")
	began := time.Now()
	size := writeCostInput(t, input, n, start, end)
	t.Logf("OpenMetrics input: %d targets, %.1f GB, written in %s", n, float64(size)/1e9, time.Since(began).Round(time.Second))

	data := filepath.Join(dir, "data")
	began = time.Now()
	cmd := exec.Command(pt, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=744h", input, data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
	}
	t.Logf("backfilled in %s", time.Since(began).Round(time.Second))
	if err := os.Remove(input); err != nil {
		t.Fatal(err)
	}

	// The rule files: before, current, and a copy of the current buckets group at 1m.
	current := jsonnet(t, "rules.jsonnet", `{jobSelector: 'job="phe"'}`, "-S")
	var groups struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(current, &groups); err != nil {
		t.Fatal(err)
	}
	var bucketsCopy []map[string]any
	for _, g := range groups.Groups {
		if g["name"] != "provider-health-exporter.availability-buckets" {
			continue
		}
		var rules []map[string]any
		for i, r := range g["rules"].([]any) {
			rules = append(rules, map[string]any{"record": fmt.Sprintf("bench_copy_%d", i), "expr": r.(map[string]any)["expr"]})
		}
		bucketsCopy = append(bucketsCopy, map[string]any{"name": "bench.availability-buckets-at-1m", "interval": "1m", "rules": rules})
	}
	if len(bucketsCopy) != 1 {
		t.Fatal("no availability-buckets group in the rules")
	}
	copyYAML, err := yaml.Marshal(map[string]any{"groups": bucketsCopy})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"current.yaml": current, "before.yaml": []byte(availabilityRulesBefore), "copy.yaml": copyYAML}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The stand-in exporter: every target up, as two replicas' worth of one job would be.
	var metrics strings.Builder
	for i := range n {
		fmt.Fprintf(&metrics, "proxy_operator_provider_target_up{provider=\"p%02d\",target=\"t%05d\"} 1\n", i%costProviders, i)
	}
	exporter := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(metrics.String()))
	})}
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = exporter.Serve(el) }()
	t.Cleanup(func() { _ = exporter.Close() })

	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := pl.Addr().String()
	_ = pl.Close()
	config := fmt.Sprintf(`global: {scrape_interval: 30s, evaluation_interval: 1m}
rule_files: [current.yaml, before.yaml, copy.yaml]
scrape_configs:
  - job_name: phe
    static_configs: [{targets: [%q]}]
`, el.Addr().String())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+data,
		"--storage.tsdb.retention.time=90d", "--web.listen-address="+promAddr, "--log.level=warn")
	p.Dir = dir
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.Stdout, p.Stderr = logFile, logFile
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = p.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})
	api := "http://" + promAddr
	waitFor(t, 5*time.Minute, func() bool {
		resp, err := http.Get(api + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Every group evaluated at least once since the start (the 5m groups within 5 minutes).
	var rules []ruleGroupJSON
	waitFor(t, 12*time.Minute, func() bool {
		rules = ruleGroups(t, api)
		for _, g := range rules {
			if g.Interval < 3600 && g.LastEvaluation.Before(began) {
				return false
			}
		}
		return true
	})

	// Every expression at one instant: a minute after the last scrape-fed evaluations.
	at := time.Now()
	type row struct {
		group, file string
		rules       int
		samples     int64
		queryTime   float64
		evaluation  float64
		interval    float64
	}
	var rows []row
	for _, g := range rules {
		r := row{group: g.Name, file: filepath.Base(g.File), rules: len(g.Rules), evaluation: g.EvaluationTime, interval: g.Interval}
		for _, rule := range g.Rules {
			s, qt := queryStats(t, api, rule.Query, at)
			r.samples += s
			r.queryTime += qt
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].file+rows[i].group < rows[j].file+rows[j].group })
	var report strings.Builder
	fmt.Fprintf(&report, "\n%d targets (%d providers), at %s:\n\n", n, costProviders, at.UTC().Format(time.RFC3339))
	fmt.Fprintln(&report, "| rules | group | interval | rules | samples read per evaluation | per target | query time (stats) | evaluation time (/api/v1/rules) | samples per hour | samples per hour at 5,000 targets |")
	fmt.Fprintln(&report, "|---|---|---|---|---|---|---|---|---|---|")
	var perHour = map[string]float64{}
	for _, r := range rows {
		hourly := float64(r.samples) * 3600 / r.interval
		if r.file != "copy.yaml" {
			perHour[r.file] += hourly
		}
		fmt.Fprintf(&report, "| %s | %s | %gs | %d | %d | %.1f | %.3fs | %.3fs | %.3g | %.3g |\n",
			strings.TrimSuffix(r.file, ".yaml"), r.group, r.interval, r.rules, r.samples, float64(r.samples)/float64(n), r.queryTime, r.evaluation, hourly, hourly*5000/float64(n))
	}
	fmt.Fprintf(&report, "\nsamples read per hour: before %.3g, current %.3g (at 5,000 targets: %.3g and %.3g)\n",
		perHour["before.yaml"], perHour["current.yaml"], perHour["before.yaml"]*5, perHour["current.yaml"]*5)
	t.Log(report.String())

	// What the rules compute from the backfilled data: every target up except t00000, down one
	// minute in every 100 of the 1m series (before) and one sample of every 100 in the buckets.
	for _, q := range []struct {
		expr string
		want float64
	}{
		{`count(provider_target:proxy_operator_provider_target_up:availability30d)`, float64(n)},
		{`count(before_provider_target:proxy_operator_provider_target_up:availability30d)`, float64(n)},
		{`min(provider_target:proxy_operator_provider_target_up:availability30d)`, 0.99},
		{`min(before_provider_target:proxy_operator_provider_target_up:availability30d)`, 0.99},
	} {
		if got := queryValue(t, api, q.expr, at); got < q.want-0.001 || got > q.want+0.001 {
			t.Errorf("%s = %g, want about %g", q.expr, got, q.want)
		}
	}
	// The 30d windows of the current rules read two series of at most 720 buckets per target.
	for _, r := range rules {
		if r.Name != "provider-health-exporter.availability" {
			continue
		}
		for _, rule := range r.Rules {
			if strings.HasPrefix(rule.Name, "provider_target:") && strings.HasSuffix(rule.Name, ":availability30d") {
				if s, _ := queryStats(t, api, rule.Query, at); s > int64(2*721*n) {
					t.Errorf("%s reads %d samples, more than 2 x 721 per target", rule.Name, s)
				}
			}
		}
	}
}

// writeCostInput writes the OpenMetrics input of TestAvailabilityCost and returns its size.
func writeCostInput(t *testing.T, path string, n int, start, end time.Time) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	series := func(name, labels string, from time.Time, step time.Duration, value func(i int) int) {
		i := 0
		for ts := from.Unix(); ts <= end.Unix(); ts += int64(step / time.Second) {
			line = append(line[:0], name...)
			line = append(line, labels...)
			line = append(line, ' ')
			line = strconv.AppendInt(line, int64(value(i)), 10)
			line = append(line, ' ')
			line = strconv.AppendInt(line, ts, 10)
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	one := func(int) int { return 1 }
	label := func(i int) string {
		return fmt.Sprintf(`{job="phe",provider="p%02d",target="t%05d"}`, i%costProviders, i)
	}
	family := func(name string) { fmt.Fprintf(w, "# TYPE %s gauge\n", name) }

	// Before: one sample a minute per target for 30d and an hour; t00000 is down one minute in
	// every 100.
	family("before_provider_target:proxy_operator_provider_target_up:max")
	for i := range n {
		v := one
		if i == 0 {
			v = func(j int) int { return boolInt(j%100 != 0) }
		}
		series("before_provider_target:proxy_operator_provider_target_up:max", label(i), start, time.Minute, v)
	}
	// Current: hourly buckets per target (t00000: 59.4 of 60 up on average, written as 6 down
	// samples of 600 over every 10 buckets) and per provider.
	hourStart := start.Truncate(time.Hour)
	for _, what := range []string{"up_samples1h", "observed_samples1h"} {
		name := "provider_target:proxy_operator_provider_target_up:" + what
		family(name)
		for i := range n {
			v := func(int) int { return 60 }
			if i == 0 && what == "up_samples1h" {
				v = func(j int) int { return 60 - boolInt(j%10 < 6) }
			}
			series(name, label(i), hourStart, time.Hour, v)
		}
	}
	for _, what := range []string{"up_samples1h", "observed_samples1h", "covered_samples1h"} {
		name := "provider:proxy_operator_provider_target_up:" + what
		family(name)
		for p := range costProviders {
			per := n / costProviders
			if what == "covered_samples1h" {
				per = 1
			}
			series(name, fmt.Sprintf(`{job="phe",provider="p%02d"}`, p), hourStart, time.Hour, func(int) int { return 60 * per })
		}
	}
	// Current: the per-provider minute series for the short windows (up to 6h), 7 hours.
	for _, what := range []string{"up_targets", "observed_targets"} {
		name := "provider:proxy_operator_provider_target_up:" + what
		family(name)
		for p := range costProviders {
			series(name, fmt.Sprintf(`{job="phe",provider="p%02d"}`, p), end.Add(-7*time.Hour), time.Minute, func(int) int { return n / costProviders })
		}
	}
	// The exporter's own series the buckets read, 2 hours at the 30s scrape interval.
	family("proxy_operator_provider_target_up")
	for i := range n {
		series("proxy_operator_provider_target_up", fmt.Sprintf(`{instance="exporter",job="phe",provider="p%02d",target="t%05d"}`, i%costProviders, i), end.Add(-2*time.Hour), 30*time.Second, one)
	}
	fmt.Fprintln(w, "# EOF")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not done within %s", d)
		}
		time.Sleep(2 * time.Second)
	}
}

type ruleGroupJSON struct {
	Name           string    `json:"name"`
	File           string    `json:"file"`
	Interval       float64   `json:"interval"`
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []struct {
		Name  string `json:"name"`
		Query string `json:"query"`
	} `json:"rules"`
}

func ruleGroups(t *testing.T, api string) []ruleGroupJSON {
	t.Helper()
	var r struct {
		Data struct {
			Groups []ruleGroupJSON `json:"groups"`
		} `json:"data"`
	}
	getJSON(t, api+"/api/v1/rules?type=record", &r)
	return r.Data.Groups
}

// queryStats runs expr at at and returns the samples it read (totalQueryableSamples) and its
// evaluation time in seconds.
func queryStats(t *testing.T, api, expr string, at time.Time) (int64, float64) {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Stats struct {
				Timings struct {
					EvalTotalTime float64 `json:"evalTotalTime"`
				} `json:"timings"`
				Samples struct {
					TotalQueryableSamples int64 `json:"totalQueryableSamples"`
				} `json:"samples"`
			} `json:"stats"`
		} `json:"data"`
	}
	getJSON(t, api+"/api/v1/query?"+url.Values{"query": {expr}, "time": {strconv.FormatInt(at.Unix(), 10)}, "stats": {"all"}}.Encode(), &r)
	if r.Status != "success" {
		t.Fatalf("%s: %s", expr, r.Error)
	}
	return r.Data.Stats.Samples.TotalQueryableSamples, r.Data.Stats.Timings.EvalTotalTime
}

func queryValue(t *testing.T, api, expr string, at time.Time) float64 {
	t.Helper()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	getJSON(t, api+"/api/v1/query?"+url.Values{"query": {expr}, "time": {strconv.FormatInt(at.Unix(), 10)}}.Encode(), &r)
	if len(r.Data.Result) != 1 {
		t.Fatalf("%s: %d results, want 1", expr, len(r.Data.Result))
	}
	v, err := strconv.ParseFloat(r.Data.Result[0].Value[1].(string), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
}
