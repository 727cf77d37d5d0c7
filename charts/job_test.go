package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

// jobMatcher finds every matcher of the job label in a rendered rule, inhibit rule or
// dashboard query, whatever its operator and quoting (job="x", job=~\"x\").
var jobMatcher = regexp.MustCompile(`\bjob\s*(=~|!~|!=|=)\s*\\?"([^"\\]*)\\?"`)

// operatorJob is the job the Prometheus Operator gives the series of a ServiceMonitor's
// endpoints: the value of the Service's label named by the ServiceMonitor's jobLabel when the
// Service has it, else the Service's name. It reads the rendered objects only, not the chart's
// helper, so it checks the helper.
func operatorJob(t *testing.T, objs objects, sm *unstructured.Unstructured) string {
	t.Helper()
	sel, _ := field(sm, "spec", "selector", "matchLabels").(map[string]any)
	var svc *unstructured.Unstructured
	for _, s := range objs.all("Service") {
		match := len(sel) > 0
		for k, v := range sel {
			if s.GetLabels()[k] != v {
				match = false
			}
		}
		if match {
			if svc != nil {
				t.Fatalf("ServiceMonitor %s selects two Services: %s and %s", sm.GetName(), svc.GetName(), s.GetName())
			}
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("ServiceMonitor %s selects no Service of the rendering (%v)", sm.GetName(), sel)
	}
	if jl, _ := field(sm, "spec", "jobLabel").(string); jl != "" {
		if v := svc.GetLabels()[jl]; v != "" {
			return v
		}
	}
	return svc.GetName()
}

// jobsIn returns every job a rendered text's matchers name, failing on any matcher that is not
// an equality (the chart's rules select one job) and on a placeholder left unreplaced.
func jobsIn(t *testing.T, what, text string) []string {
	t.Helper()
	if strings.Contains(text, "__PHE_") {
		t.Errorf("%s still holds a placeholder of charts/chart_config.libsonnet", what)
	}
	var jobs []string
	for _, m := range jobMatcher.FindAllStringSubmatch(text, -1) {
		if m[1] != "=" {
			if m[2] == "$job" {
				continue // the dashboard's own variable
			}
			t.Errorf("%s: matcher %s is not an equality", what, m[0])
		}
		if !slices.Contains(jobs, m[2]) {
			jobs = append(jobs, m[2])
		}
	}
	return jobs
}

// TestRulesFollowTheRelease renders the chart with its names changed every way a user changes
// them (nameOverride, fullnameOverride, a ServiceMonitor jobLabel, two releases in one namespace)
// and checks that every job matcher of the PrometheusRule, the AlertmanagerConfig and the
// dashboards names the job the Prometheus Operator gives the ServiceMonitor's series (read
// from the rendered Service, as the operator does), and that the dashboards' job variable
// opens on that job. Then promtool evaluates each release's rendered rules over series of both
// releases' jobs: the release's alert fires for its own series, and for no other release's.
func TestRulesFollowTheRelease(t *testing.T) {
	h := newHelm(t)
	promtool := promstack.Promtool(t)
	on := []string{"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
		"--set", "alertmanagerConfig.enabled=true", "--set", "dashboards.enabled=true"}
	type rendering struct {
		name    string
		release string
		args    []string
		job     string // the job the case is about, as a reader expects it
	}
	cases := []rendering{
		{"defaults", "provider-health-exporter", nil, "provider-health-exporter"},
		{"nameOverride", "prod", []string{"--set", "nameOverride=phx"}, "prod-phx"},
		{"nameOverride in the release's name", "phx-east", []string{"--set", "nameOverride=phx"}, "phx-east"},
		{"fullnameOverride", "prod", []string{"--set", "fullnameOverride=edge-health"}, "edge-health"},
		{"jobLabel", "prod", []string{"--set", "nameOverride=phx", "--set", "serviceMonitor.jobLabel=app.kubernetes.io/name"}, "phx"},
		{"jobLabel from service.labels", "prod", []string{"--set", "serviceMonitor.jobLabel=team-job", "--set", "service.labels.team-job=infra-health"}, "infra-health"},
		{"jobLabel the Service lacks", "prod", []string{"--set", "serviceMonitor.jobLabel=missing"}, "prod-provider-health-exporter"},
		{"first of two releases", "site-a", nil, "site-a-provider-health-exporter"},
		{"second of two releases", "site-b", nil, "site-b-provider-health-exporter"},
	}
	rendered := map[string]objects{}
	for _, c := range cases {
		out, err := h.run(append(append([]string{"template", c.release, chartDir(t), "--namespace", "monitoring"}, on...), c.args...)...)
		if err != nil {
			t.Fatalf("%s: helm template: %v\n%s", c.name, err, out)
		}
		objs := objects(kube.DecodeObjects(t, []byte(out)))
		rendered[c.name] = objs
		sm := objs.all("ServiceMonitor")
		if len(sm) != 1 {
			t.Fatalf("%s: want one ServiceMonitor, found %v", c.name, objs.kinds())
		}
		job := operatorJob(t, objs, sm[0])
		if job != c.job {
			t.Errorf("%s: the Prometheus Operator gives the series job %q, the case expects %q", c.name, job, c.job)
		}
		for _, kind := range []string{"PrometheusRule", "AlertmanagerConfig", "ConfigMap"} {
			for _, o := range objs.all(kind) {
				if kind == "ConfigMap" && !strings.HasSuffix(o.GetName(), "-dashboards") {
					continue
				}
				text := asYAML(t, o.Object)
				jobs := jobsIn(t, c.name+": "+kind, text)
				if kind == "PrometheusRule" && len(jobs) == 0 {
					t.Errorf("%s: the PrometheusRule selects no job", c.name)
				}
				for _, j := range jobs {
					if j != job {
						t.Errorf("%s: %s %s selects job %q, but the series carry job %q", c.name, kind, o.GetName(), j, job)
					}
				}
			}
		}
		// The dashboard's job variable lists the release's job, and its uid is the release's.
		cms := objs.all("ConfigMap")
		var dash map[string]any
		for _, cm := range cms {
			if s, ok := field(cm, "data", "provider-health.json").(string); ok {
				if err := json.Unmarshal([]byte(s), &dash); err != nil {
					t.Fatalf("%s: the dashboard is not JSON: %v", c.name, err)
				}
			}
		}
		if dash == nil {
			t.Fatalf("%s: no ConfigMap holds provider-health.json (%v)", c.name, objs.kinds())
		}
		var variable string
		var current any
		for _, v := range dash["templating"].(map[string]any)["list"].([]any) {
			if v := v.(map[string]any); v["name"] == "job" {
				variable = v["query"].(map[string]any)["query"].(string)
				current = v["current"]
			}
		}
		if want := fmt.Sprintf(`job="%s"`, job); !strings.Contains(variable, want) {
			t.Errorf("%s: the dashboard's job variable is %q, want it to select %s", c.name, variable, want)
		}
		// The variable opens on the release's job (its default), not on All.
		cur, _ := current.(map[string]any)
		for _, k := range []string{"value", "text"} {
			if got, want := fmt.Sprint(cur[k]), fmt.Sprint([]any{job}); got != want {
				t.Errorf("%s: the dashboard's job variable opens on %s %s, want %s (the release's job)", c.name, k, got, want)
			}
		}
	}
	uid := func(name string) any {
		for _, cm := range rendered[name].all("ConfigMap") {
			if s, ok := field(cm, "data", "provider-health.json").(string); ok {
				var d map[string]any
				_ = json.Unmarshal([]byte(s), &d)
				return d["uid"]
			}
		}
		return nil
	}
	if a, b := uid("first of two releases"), uid("second of two releases"); a == b {
		t.Errorf("two releases' dashboards share the uid %v: Grafana would keep one", a)
	}

	// promtool: each release's rules over the series of every job of the cases. ProviderHealthTargetDown
	// fires for the provider whose series carry the release's job, and for no other.
	dir := t.TempDir()
	var series []string
	provider := func(job string) string { return "p-" + job }
	jobs := map[string]bool{}
	for _, c := range cases {
		jobs[c.job] = true
	}
	for j := range jobs {
		series = append(series, fmt.Sprintf(`      - series: 'proxy_operator_provider_target_up{job=%q, instance="a:9847", provider=%q, target="t1"}'
        values: '0x15'`, j, provider(j)))
	}
	slices.Sort(series)
	for i, c := range cases {
		rule := rendered[c.name].all("PrometheusRule")
		if len(rule) != 1 {
			t.Fatalf("%s: want one PrometheusRule, found %v", c.name, rendered[c.name].kinds())
		}
		groups, err := yaml.Marshal(map[string]any{"groups": field(rule[0], "spec", "groups")})
		if err != nil {
			t.Fatal(err)
		}
		rules := filepath.Join(dir, fmt.Sprintf("rules-%d.yaml", i))
		if err := os.WriteFile(rules, groups, 0o600); err != nil {
			t.Fatal(err)
		}
		job := operatorJob(t, rendered[c.name], rendered[c.name].all("ServiceMonitor")[0])
		unit := fmt.Sprintf(`rule_files:
  - %s
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s
    promql_expr_test:
      - eval_time: 10m
        expr: ALERTS{alertname="ProviderHealthTargetDown", alertstate="firing"}
        exp_samples:
          - labels: 'ALERTS{alertname="ProviderHealthTargetDown", alertstate="firing", provider=%q, target="t1", severity="warning"}'
            value: 1
`, filepath.Base(rules), strings.Join(series, "\n"), provider(job))
		test := filepath.Join(dir, fmt.Sprintf("test-%d.yaml", i))
		if err := os.WriteFile(test, []byte(unit), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if out, err := promstack.CheckRules(ctx, promtool, rules); err != nil {
			t.Errorf("%s: promtool check rules on the rendered PrometheusRule: %v\n%s", c.name, err, out)
		}
		if out, err := promstack.TestRules(ctx, promtool, test); err != nil {
			t.Errorf("%s: the rendered rules over series of job %q: %v\n%s", c.name, job, err, out)
		}
		cancel()
	}
}
