package mixin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// TestGeneratedFilesUpToDate: the committed prometheus_alerts.yaml, prometheus_rules.yaml,
// alertmanager/inhibit_rules.yaml, alertmanager/route.yaml and dashboards_out/ are what the
// sources render (make mixin regenerates them).
func TestGeneratedFilesUpToDate(t *testing.T) {
	t.Parallel()
	for file, entry := range map[string]string{
		"prometheus_alerts.yaml":          "alerts.jsonnet",
		"prometheus_rules.yaml":           "rules.jsonnet",
		"alertmanager/inhibit_rules.yaml": "inhibit_rules.jsonnet",
		"alertmanager/route.yaml":         "route.jsonnet",
	} {
		want := jsonnet(t, entry, "", "-S")
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("mixin/%s differs from what mixin/%s renders: run make mixin and commit the result", file, entry)
		}
	}
	out := t.TempDir()
	if _, err := goTool(t, "jsonnet", "-J", "mixin", "-m", out, "mixin/dashboards.jsonnet"); err != nil {
		t.Fatal(err)
	}
	rendered, _ := filepath.Glob(filepath.Join(out, "*"))
	committed, _ := filepath.Glob("dashboards_out/*")
	if len(rendered) == 0 || len(rendered) != len(committed) {
		t.Errorf("dashboards render %d files, dashboards_out/ holds %d: run make mixin", len(rendered), len(committed))
	}
	for _, r := range rendered {
		want, _ := os.ReadFile(r)
		got, err := os.ReadFile(filepath.Join("dashboards_out", filepath.Base(r)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("mixin/dashboards_out/%s differs from its sources (%v): run make mixin", filepath.Base(r), err)
		}
	}
}

// TestSourcesFormatted: every source is as jsonnetfmt (node-mixin's settings) writes it.
func TestSourcesFormatted(t *testing.T) {
	t.Parallel()
	if out, err := goTool(t, "jsonnetfmt", append(append([]string{"--test"}, fmtFlags...), sources(t)...)...); err != nil {
		t.Errorf("jsonnetfmt would change sources (run make mixin): %v\n%s", err, out)
	}
}

// TestSourcesLint: jsonnet-lint finds nothing (unused locals, unknown fields, ...).
func TestSourcesLint(t *testing.T) {
	t.Parallel()
	if out, err := goTool(t, "jsonnet-lint", append([]string{"-J", "mixin"}, sources(t)...)...); err != nil {
		t.Errorf("jsonnet-lint: %v\n%s", err, out)
	}
}

// TestPromtool: promtool (Prometheus 3) accepts the generated rule files, and the rule unit
// tests in tests/ pass. A configuration with multi-cluster on and every window changed also
// renders valid rules, with the windows it was given.
func TestPromtool(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(context.Background(), pt, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("check", "rules", "prometheus_alerts.yaml", "prometheus_rules.yaml")
	if !strings.Contains(out, "SUCCESS: 24 rules found") || !strings.Contains(out, "SUCCESS: 26 rules found") {
		t.Errorf("promtool check rules: %s", out)
	}
	tests, _ := filepath.Glob("tests/*.yaml")
	if len(tests) == 0 {
		t.Fatal("no rule tests in tests/")
	}
	if out := run(append([]string{"test", "rules"}, tests...)...); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %s", out)
	}

	const override = `{showMultiCluster: true, clusterLabel: "k8s_cluster", targetDownFor: "30s", jobSelector: 'job=~"phe.*"'}`
	dir := t.TempDir()
	alerts := filepath.Join(dir, "alerts.yaml")
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(alerts, jsonnet(t, "alerts.jsonnet", override, "-S"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, jsonnet(t, "rules.jsonnet", override, "-S"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", alerts, rules)
	groups, errs := parseRules(t, alerts)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	recorded, errs := parseRules(t, rules)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// Every aggregation and every join keeps the cluster label, in the alerts and in the
	// recording rules (the availability rules join the exporter's series on their labels).
	grouping := regexp.MustCompile(`\b(by|on) \(([^)]*)\)`)
	for _, g := range append(groups.Groups, recorded.Groups...) {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if !strings.Contains(r.Expr, `job=~"phe.*"`) {
				t.Errorf("%s: the overridden job selector is not in %s", name, r.Expr)
			}
			for _, m := range grouping.FindAllStringSubmatch(r.Expr, -1) {
				if !strings.HasPrefix(m[2], "k8s_cluster") {
					t.Errorf("%s: multi-cluster is on but %s drops k8s_cluster: %s", name, m[0], r.Expr)
				}
			}
			if r.Alert == "ProviderHealthTargetDown" && r.For.String() != "30s" {
				t.Errorf("ProviderHealthTargetDown for: %s, want the overridden 30s", r.For)
			}
		}
	}
}

func parseRules(t *testing.T, file string) (*rulefmt.RuleGroups, []error) {
	t.Helper()
	return rulefmt.ParseFile(file, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
}

// The alerts the issue asks for; the mixin may have more, never fewer.
var wantAlerts = []string{
	"ProviderHealthTargetDown", "ProviderHealthProviderDown", "ProviderHealthTargetFlapping",
	"ProviderHealthChecksStale", "ProviderHealthChecksSlow", "ProviderHealthStoragePoolFillingUp",
	"ProviderHealthStoragePoolAlmostFull", "ProviderHealthHostKeyMismatch",
	"ProviderHealthConfigReloadFailed", "ProviderHealthHostFileInvalid", "ProviderHealthExporterDown",
	"ProviderHealthCRDWriteErrors", "ProviderHealthCRDWriterLagging", "ProviderHealthCRDWriterNoLeader",
	"ProviderHealthCRDNameClash", "ProviderHealthCRDDuplicateWriters",
	"ProviderHealthErrorBudgetFastBurn", "ProviderHealthErrorBudgetSlowBurn",
	"ProviderHealthShardMembershipDisagrees", "ProviderHealthShardTargetsUnreported", "ProviderHealthShardPartNearlyFull",
}

// TestMixtoolLint applies mixtool's lint rules to the alerts, and this project's own: one
// group, one name prefix, CamelCase names; severity info, warning or critical and no other
// rule label; summary present, untemplated, capitalised and ending with a period; description
// present; runbook_url pointing at a section of docs/runbooks.md that exists; and alerts that
// keep only provider, target, pool and (a host file's alert) file; the reason is never a label.
func TestMixtoolLint(t *testing.T) {
	t.Parallel()
	groups, errs := parseRules(t, "prometheus_alerts.yaml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// One group of alerts about verdicts and the exporter, one of the error-budget alerts
	// (alerts/burnrate.libsonnet), which read the availability rules.
	var groupNames []string
	for _, g := range groups.Groups {
		groupNames = append(groupNames, g.Name)
	}
	if !slices.Equal(groupNames, []string{"provider-health-exporter", "provider-health-exporter.error-budget"}) {
		t.Errorf("alert groups %v, want provider-health-exporter and provider-health-exporter.error-budget", groupNames)
	}
	anchors := runbookAnchors(t)
	camel := regexp.MustCompile(`^ProviderHealth[A-Z][a-zA-Z0-9]*$`)
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s holds a recording rule %s: those belong in prometheus_rules.yaml", g.Name, r.Record)
				continue
			}
			names = append(names, r.Alert)
			if !camel.MatchString(r.Alert) {
				t.Errorf("%s: not a CamelCase name with the ProviderHealth prefix", r.Alert)
			}
			if sev := r.Labels["severity"]; !slices.Contains([]string{"info", "warning", "critical"}, sev) {
				t.Errorf("%s: severity %q, want info, warning or critical", r.Alert, sev)
			}
			if len(r.Labels) != 1 {
				t.Errorf("%s: rule labels %v, want severity only", r.Alert, r.Labels)
			}
			summary := r.Annotations["summary"]
			switch {
			case summary == "":
				t.Errorf("%s: no summary", r.Alert)
			case strings.Contains(summary, "{{"):
				t.Errorf("%s: summary %q is templated", r.Alert, summary)
			case !strings.HasSuffix(summary, ".") || strings.ToUpper(summary[:1]) != summary[:1]:
				t.Errorf("%s: summary %q is not a capitalised sentence ending with a period", r.Alert, summary)
			}
			if d := r.Annotations["description"]; d == "" || !strings.Contains(d, "{{") {
				t.Errorf("%s: description %q is missing or not templated", r.Alert, d)
			}
			url := r.Annotations["runbook_url"]
			const prefix = "https://github.com/provider-health-exporter/provider-health-exporter/blob/main/docs/runbooks.md#"
			if !strings.HasPrefix(url, prefix) || !anchors[strings.TrimPrefix(url, prefix)] {
				t.Errorf("%s: runbook_url %q is not a section of docs/runbooks.md", r.Alert, url)
			}
			if len(r.Annotations) != 3 {
				t.Errorf("%s: annotations %v, want summary, description and runbook_url", r.Alert, r.Annotations)
			}
			checkAlertLabels(t, r.Alert, r.Expr)
		}
	}
	for _, want := range wantAlerts {
		if !slices.Contains(names, want) {
			t.Errorf("alert %s is missing", want)
		}
	}
}

// checkAlertLabels: every outermost aggregation of an alert's expression keeps only provider,
// target and pool, so replicas merge and the reason never becomes a label.
func checkAlertLabels(t *testing.T, name, expr string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	var outer []*parser.AggregateExpr
	var walk func(n parser.Node)
	walk = func(n parser.Node) {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			outer = append(outer, n)
		case *parser.BinaryExpr:
			walk(n.LHS)
			walk(n.RHS)
		case *parser.ParenExpr:
			walk(n.Expr)
		case *parser.NumberLiteral:
		default:
			t.Errorf("%s: the alert's value comes from %T (%s), not an aggregation over replicas", name, n, n)
		}
	}
	walk(e)
	for _, a := range outer {
		if a.Without {
			t.Errorf("%s: %s aggregates without labels; want by (...)", name, a)
		}
		for _, l := range a.Grouping {
			if !slices.Contains([]string{"provider", "target", "pool", "file"}, l) {
				t.Errorf("%s: %s keeps the label %s", name, a, l)
			}
		}
	}
}

// TestPrometheusRule: the PrometheusRule entry point holds both groups, takes its metadata and
// a _config override from top-level arguments (as deploy/ and an end-to-end test use it).
func TestPrometheusRule(t *testing.T) {
	t.Parallel()
	out := jsonnet(t, "prometheus_rule.jsonnet", `{targetDownFor: "20s"}`,
		"--tla-str", "namespace=monitoring", "--tla-code", `labels={release: "prom"}`)
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert  string `json:"alert"`
					Record string `json:"record"`
					For    string `json:"for"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(out, &pr); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name != "provider-health-exporter" ||
		pr.Metadata.Namespace != "monitoring" || pr.Metadata.Labels["release"] != "prom" {
		t.Errorf("PrometheusRule header %s %s %+v", pr.APIVersion, pr.Kind, pr.Metadata)
	}
	rules, overridden := 0, false
	for _, g := range pr.Spec.Groups {
		rules += len(g.Rules)
		for _, r := range g.Rules {
			if r.Alert == "ProviderHealthTargetDown" && r.For == "20s" {
				overridden = true
			}
		}
	}
	if len(pr.Spec.Groups) != 6 || rules != 50 {
		t.Errorf("%d groups with %d rules, want the 6 groups of 24 alerting rules (23 alerts, ExporterDown twice) and 26 recording rules", len(pr.Spec.Groups), rules)
	}
	if !overridden {
		t.Error("the config argument did not set ProviderHealthTargetDown's for: to 20s")
	}
}

// TestDocsLinked: the README links the mixin's documentation, which links the runbooks.
func TestDocsLinked(t *testing.T) {
	for file, link := range map[string]string{"README.md": "docs/mixin.md", "docs/mixin.md": "runbooks.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "]("+link+")") {
			t.Errorf("%s does not link %s", file, link)
		}
	}
}

// multiClusterTest is a promtool rule test for the alerts rendered with showMultiCluster: the
// same provider and target in two clusters give two alerts, each with its cluster label, and
// the description's reason query stays within the alert's cluster. An exporter down in one
// cluster while the other's is up: ExporterDown's description counts the replicas still
// scraped in its own cluster only (none).
const multiClusterTest = `rule_files:
  - %s
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'proxy_operator_provider_target_up{cluster="eu", job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1"}'
        values: '0x10'
      - series: 'proxy_operator_provider_target_up{cluster="us", job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1"}'
        values: '0x10'
      - series: 'proxy_operator_provider_target_reason{cluster="eu", job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1", reason="TCPUnreachable"}'
        values: '1x10'
      - series: 'proxy_operator_provider_target_reason{cluster="us", job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1", reason="SSHAuthFailed"}'
        values: '1x10'
      - series: 'up{cluster="eu", job="provider-health-exporter", instance="a:9847"}'
        values: '0x10'
      - series: 'up{cluster="us", job="provider-health-exporter", instance="a:9847"}'
        values: '1x10'
    alert_rule_test:
      - eval_time: 5m
        alertname: ProviderHealthExporterDown
        exp_alerts:
          - exp_labels: {severity: critical, cluster: eu}
            exp_annotations:
              summary: The provider health exporter is down or not scraped.
              description: 'Prometheus cannot scrape the provider health exporter at a:9847 (for more than 5m): no replica is scraped, so no verdict is current and no provider alert can fire. Look for OOMKilled in kubectl -n NAMESPACE get pods -l app.kubernetes.io/name=provider-health-exporter -o yaml, and read every replica: kubectl -n NAMESPACE logs -l app.kubernetes.io/name=provider-health-exporter --prefix --tail=-1 --previous.'
              runbook_url: https://github.com/provider-health-exporter/provider-health-exporter/blob/main/docs/runbooks.md#providerhealthexporterdown
      - eval_time: 5m
        alertname: ProviderHealthTargetDown
        exp_alerts:
          - exp_labels: {severity: warning, cluster: eu, provider: kvm-lab, target: hv1}
            exp_annotations:
              summary: A provider target has been down.
              description: 'Target hv1 of provider kvm-lab has been down for more than 5m on every exporter replica; reason: TCPUnreachable.'
              runbook_url: https://github.com/provider-health-exporter/provider-health-exporter/blob/main/docs/runbooks.md#providerhealthtargetdown
          - exp_labels: {severity: warning, cluster: us, provider: kvm-lab, target: hv1}
            exp_annotations:
              summary: A provider target has been down.
              description: 'Target hv1 of provider kvm-lab has been down for more than 5m on every exporter replica; reason: SSHAuthFailed.'
              runbook_url: https://github.com/provider-health-exporter/provider-health-exporter/blob/main/docs/runbooks.md#providerhealthtargetdown
`

func TestPromtoolMultiCluster(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	dir := t.TempDir()
	alerts := filepath.Join(dir, "alerts.yaml")
	if err := os.WriteFile(alerts, jsonnet(t, "alerts.jsonnet", `{showMultiCluster: true}`, "-S"), 0o644); err != nil {
		t.Fatal(err)
	}
	test := filepath.Join(dir, "multicluster_test.yaml")
	if err := os.WriteFile(test, []byte(fmt.Sprintf(multiClusterTest, alerts)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "test", "rules", test).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules (multi-cluster): %v\n%s", err, out)
	}
}

// TestRunbookCoversEveryReason: the TargetDown runbook says what to do for every reason of the
// catalogue (docs/reasons.md, which the checks package keeps equal to the code), in its table
// of shared reasons or in a type's table (the runbooks.md of the type's package, which make
// generate copies in), so a reason added there without a runbook step fails here.
func TestRunbookCoversEveryReason(t *testing.T) {
	reasons, err := os.ReadFile(filepath.Join(repoRoot, "docs", "reasons.md"))
	if err != nil {
		t.Fatal(err)
	}
	runbooks, err := os.ReadFile(filepath.Join(repoRoot, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(runbooks)
	start := strings.Index(section, "## ProviderHealthTargetDown\n")
	if start < 0 {
		t.Fatal("docs/runbooks.md has no ProviderHealthTargetDown section")
	}
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	// The first cell of each row of the runbook's table, e.g. "`Unauthorized`, `Forbidden`".
	covered := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+) \|`).FindAllStringSubmatch(section, -1) {
		for _, r := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(m[1], -1) {
			covered[r[1]] = true
		}
	}
	all := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\|").FindAllStringSubmatch(string(reasons), -1)
	if len(all) < 20 {
		t.Fatalf("found only %d reasons in docs/reasons.md", len(all))
	}
	for _, r := range all {
		if r[1] != "Ready" && !covered[r[1]] {
			t.Errorf("reason %s (docs/reasons.md) has no row in the ProviderHealthTargetDown runbook's tables: "+
				"a reason of one type goes in the runbooks.md of its package (then make generate), a shared one in docs/runbooks.md", r[1])
		}
	}
}

// TestInhibitRulesMatchAlertLabels: every inhibit rule of alertmanager/inhibit_rules.yaml
// (default _config, and rendered with showMultiCluster or another cluster label) names alerts
// the mixin has, and its equal labels are the cluster label, always (Prometheus adds its
// external labels to every alert it sends, so an outage in one cluster must never mute a
// provider of the same name in another, whatever showMultiCluster says), and labels both
// alerts really carry: every outermost aggregation of their expressions keeps them. A label
// that an alert lacks would be "equal" on every alert (both empty), and one provider's outage
// would mute every provider's targets. A rule's matchers are its alertname and, to tell two
// alerts of one name apart, their severity.
func TestInhibitRulesMatchAlertLabels(t *testing.T) {
	t.Parallel()
	for config, cluster := range map[string]string{
		"":                              "cluster",
		"{showMultiCluster: true}":      "cluster",
		"{clusterLabel: 'k8s_cluster'}": "k8s_cluster",
	} {
		var doc struct {
			InhibitRules []struct {
				SourceMatchers []string `yaml:"source_matchers"`
				TargetMatchers []string `yaml:"target_matchers"`
				Equal          []string `yaml:"equal"`
			} `yaml:"inhibit_rules"`
		}
		if err := yaml.Unmarshal(jsonnet(t, "inhibit_rules.jsonnet", config, "-S"), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.InhibitRules) == 0 {
			t.Fatalf("config %q: no inhibit rules", config)
		}
		dir := t.TempDir()
		alertsFile := filepath.Join(dir, "alerts.yaml")
		if err := os.WriteFile(alertsFile, jsonnet(t, "alerts.jsonnet", config, "-S"), 0o644); err != nil {
			t.Fatal(err)
		}
		groups, errs := parseRules(t, alertsFile)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		type rule struct{ expr, severity string }
		rules := map[string][]rule{}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				rules[r.Alert] = append(rules[r.Alert], rule{r.Expr, r.Labels["severity"]})
			}
		}
		alertname := regexp.MustCompile(`^alertname="([A-Za-z]+)"$`)
		severity := regexp.MustCompile(`^severity="([a-z]+)"$`)
		for _, ir := range doc.InhibitRules {
			if !slices.Contains(ir.Equal, cluster) {
				t.Errorf("config %q: inhibit rule %+v: equal lacks the cluster label %s", config, ir, cluster)
			}
			for _, ms := range [][]string{ir.SourceMatchers, ir.TargetMatchers} {
				if len(ms) == 0 || len(ms) > 2 || !alertname.MatchString(ms[0]) || (len(ms) == 2 && !severity.MatchString(ms[1])) {
					t.Errorf("config %q: matchers %v: want alertname=\"...\", then at most severity=\"...\"", config, ms)
					continue
				}
				name := alertname.FindStringSubmatch(ms[0])[1]
				matched := 0
				for _, r := range rules[name] {
					if len(ms) == 2 && severity.FindStringSubmatch(ms[1])[1] != r.severity {
						continue
					}
					matched++
					e, err := parser.NewParser(parser.Options{}).ParseExpr(r.expr)
					if err != nil {
						t.Fatal(err)
					}
					parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
						a, ok := n.(*parser.AggregateExpr)
						if !ok {
							return nil
						}
						for _, p := range path {
							if _, inner := p.(*parser.AggregateExpr); inner {
								return nil // not outermost
							}
						}
						for _, l := range ir.Equal {
							if l != cluster && !slices.Contains(a.Grouping, l) {
								t.Errorf("config %q: %s does not carry %s, which the inhibit rule's equal needs: %s", config, name, l, a)
							}
						}
						return nil
					})
				}
				if matched == 0 {
					t.Errorf("config %q: inhibit rule matchers %v match no alert of the mixin", config, ms)
				}
			}
		}
	}
}

// TestRouteDocumented: docs/mixin.md shows the recommended route as alertmanager/route.yaml
// renders it, so the route a reader copies is the one the end-to-end test runs.
func TestRouteDocumented(t *testing.T) {
	t.Parallel()
	route, err := os.ReadFile("alertmanager/route.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "mixin.md"))
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for _, l := range strings.Split(strings.TrimSpace(string(route)), "\n") {
		if !strings.HasPrefix(l, "#") {
			body = append(body, l)
		}
	}
	if want := strings.Join(body, "\n"); !strings.Contains(string(doc), want) {
		t.Errorf("docs/mixin.md does not show the recommended route as mixin/alertmanager/route.yaml holds it:\n%s", want)
	}
}
