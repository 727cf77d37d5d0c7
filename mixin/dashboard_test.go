package mixin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/prometheus/promql/parser"
)

// The parts of a dashboard these tests inspect (plain JSON: the SDK's strict decoding only
// reports errors, see LIBRARY-FACTS).
type dashJSON struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Hide  int    `json:"hide"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panelJSON `json:"panels"`
}

type panelJSON struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

// decodeStrict decodes a dashboard with the Grafana foundation SDK's strict decoder, which
// demands every option of the panel types it knows.
func decodeStrict(t *testing.T, raw []byte) {
	t.Helper()
	plugins.RegisterDefaultPlugins()
	// The mixin ships classic dashboard JSON (what Grafana's file provisioning and every mixin
	// use), whose type the SDK marks deprecated in favour of the v2 schema.
	//lint:ignore SA1019 the classic schema is the one this dashboard is written in
	var d dashboard.Dashboard
	err := d.UnmarshalJSONStrict(raw)
	// On success it returns a non-nil error holding no errors.
	var build cog.BuildErrors
	if err != nil && (!errors.As(err, &build) || len(build) > 0) {
		t.Errorf("strict decoding into the foundation SDK's Dashboard: %v", err)
	}
	if d.Title == nil || d.Uid == nil {
		t.Errorf("strictly decoded dashboard lacks its title or uid")
	}
}

// substitute replaces the dashboard's variables by values, as Grafana would before querying.
var substitute = strings.NewReplacer(
	"$__rate_interval", "4m",
	"$__interval", "1m",
	"$__range", "6h",
	"$datasource", "prometheus",
	"$cluster", "c1",
	"$job", "provider-health-exporter",
	"$provider", "kvm-lab",
	"$target", "hv1",
)

// knownMetrics are the metrics the exporter exports (docs/metrics.md, which the exporter's
// metrics-doc test keeps in step with /metrics), the mixin's recording rules and `up`.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{"up": true}
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(proxy_operator_[a-z0-9_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		known[m[1]] = true
	}
	groups, errs := parseRules(t, "prometheus_rules.yaml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			known[r.Record] = true
		}
	}
	if len(known) < 15 {
		t.Fatalf("only %d known metrics: docs/metrics.md or the rules did not parse", len(known))
	}
	return known
}

// queryProblems parses expr (variables substituted) as PromQL and returns the metrics it
// selects and what is wrong with it: a parse error, a metric nobody exports, no metric at all.
func queryProblems(expr string, known map[string]bool) (names, problems []string) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(substitute.Replace(expr))
	if err != nil {
		return nil, []string{fmt.Sprintf("%q does not parse as PromQL: %v", expr, err)}
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
			if !known[vs.Name] {
				problems = append(problems, fmt.Sprintf("%q selects %q, which the exporter does not export and no rule records", expr, vs.Name))
			}
		}
		return nil
	})
	if len(names) == 0 {
		problems = append(problems, fmt.Sprintf("%q selects no metric", expr))
	}
	return names, problems
}

func checkQuery(t *testing.T, where, expr string, known map[string]bool) []string {
	t.Helper()
	names, problems := queryProblems(expr, known)
	for _, p := range problems {
		t.Errorf("%s: %s", where, p)
	}
	return names
}

var labelValues = regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// checkDashboard runs every check on one rendered dashboard.
func checkDashboard(t *testing.T, raw []byte, multiCluster bool) {
	t.Helper()
	decodeStrict(t, raw)
	var d dashJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title != "Provider health" || d.UID == "" {
		t.Errorf("title %q, uid %q; want Provider health and a uid", d.Title, d.UID)
	}
	known := knownMetrics(t)

	vars := map[string]int{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Hide
		if v.Name == "datasource" {
			if v.Type != "datasource" {
				t.Errorf("variable datasource has type %s, want datasource (a picker)", v.Type)
			}
			continue
		}
		q, _ := v.Query.(map[string]any)
		query, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Query)
			continue
		}
		checkQuery(t, "variable "+v.Name, m[1], known)
	}
	for _, name := range []string{"datasource", "cluster", "job", "provider", "target"} {
		if _, ok := vars[name]; !ok {
			t.Errorf("no %s variable", name)
		}
	}
	if hidden := vars["cluster"] == 2; hidden == multiCluster {
		t.Errorf("cluster variable hide=%d with showMultiCluster %v", vars["cluster"], multiCluster)
	}

	types := map[string]bool{}
	seen := map[string]bool{}
	for _, p := range d.Panels {
		types[p.Type] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("a query of panel %q does not use the ${datasource} variable", p.Title)
			}
			for _, n := range checkQuery(t, "panel "+p.Title, tg.Expr, known) {
				seen[n] = true
			}
			if multiCluster && !strings.Contains(tg.Expr, `=~"$cluster"`) {
				t.Errorf("panel %q: multi-cluster is on but %q ignores $cluster", p.Title, tg.Expr)
			}
		}
	}
	for _, typ := range []string{"table", "state-timeline", "timeseries"} {
		if !types[typ] {
			t.Errorf("no %s panel", typ)
		}
	}
	// The panels the issue asks for, by what they show.
	for _, m := range []string{
		"proxy_operator_provider_target_up", "proxy_operator_provider_target_reason",
		"proxy_operator_provider_check_timestamp_seconds", "provider:proxy_operator_provider_target_up:sum",
		"provider:proxy_operator_provider_target_up:count", "proxy_operator_provider_check_duration_seconds",
		"proxy_operator_provider_check_timeout_seconds", "proxy_operator_kvm_storage_pool_capacity_bytes",
		"proxy_operator_kvm_storage_pool_available_bytes", "proxy_operator_provider_check_rounds_total",
		"proxy_operator_provider_checkers_abandoned_total", "proxy_operator_config_last_reload_successful",
		"proxy_operator_kvm_pool_connections", "proxy_operator_crd_writer_writes_total",
		"provider:proxy_operator_provider_target_up:availability1d", "provider:proxy_operator_provider_target_up:availability7d",
		"provider:proxy_operator_provider_target_up:availability30d", "provider_target:proxy_operator_provider_target_up:availability1d",
		"provider_target:proxy_operator_provider_target_up:availability7d", "provider_target:proxy_operator_provider_target_up:availability30d",
		"provider:proxy_operator_provider_target_up:coverage1d", "provider:proxy_operator_provider_target_up:coverage7d",
		"provider:proxy_operator_provider_target_up:coverage30d", "provider:proxy_operator_provider_target_up:error_budget_left30d",
	} {
		if !seen[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// TestDashboard checks the committed dashboard, and one rendered with multi-cluster on.
func TestDashboard(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("dashboards_out/*.json")
	if len(files) != 1 || filepath.Base(files[0]) != "provider-health.json" {
		t.Fatalf("dashboards_out holds %v, want provider-health.json", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	checkDashboard(t, raw, false)

	t.Run("multi-cluster", func(t *testing.T) {
		out := jsonnet(t, "dashboards.jsonnet", `{showMultiCluster: true}`)
		var byFile map[string]json.RawMessage
		if err := json.Unmarshal(out, &byFile); err != nil {
			t.Fatal(err)
		}
		checkDashboard(t, byFile["provider-health.json"], true)
	})
}

// A query naming a metric nobody exports, or one that does not parse, fails the checks above:
// they are not vacuous.
func TestQueryProblemsCatchesMistakes(t *testing.T) {
	known := knownMetrics(t)
	for _, expr := range []string{
		`max by (provider) (proxy_operator_provider_targets_up{job=~"$job"})`,
		`sum(rate(proxy_operator_provider_check_rounds_total{job=~"$job"}[$__rate_interval])`,
		`vector(1)`,
	} {
		if _, problems := queryProblems(expr, known); len(problems) == 0 {
			t.Errorf("queryProblems accepted %q", expr)
		}
	}
	names, problems := queryProblems(`up{job=~"$job"} * on (job) group_left () provider:proxy_operator_provider_target_up:count`, known)
	if len(problems) > 0 || !slices.Equal(names, []string{"up", "provider:proxy_operator_provider_target_up:count"}) {
		t.Errorf("names %v, problems %v; want both metrics and no problem", names, problems)
	}
}
