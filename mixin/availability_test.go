package mixin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// availabilityPanelsTest feeds recorded availability series (as the mixin's availability rules
// write them) to the dashboard's availability queries on Prometheus 3's engine, evaluated at
// 10m. Provider kvm-lab's 1d, 7d and 30d availability are 0.99, 0.995 and 0.9995, its coverage
// 0.9, 0.95 and 0.98, its budget left 0.5 (as recorded). Per target, 30d availability 0.9995
// leaves half the 99.9% objective's budget, 0.999 none, 0.998 minus one (overspent twice), 1
// all of it. A series of another job is never shown. The first %s is the per-target budget's
// expected value for kvm-edge/hv-2 (0 at 99.9%); the others are the queries, in the order of
// the panels' targets.
const availabilityPanelsTest = `rule_files: []
evaluation_interval: 1m
fuzzy_compare: true
tests:
  - interval: 1m
    input_series:
      - series: 'provider:proxy_operator_provider_target_up:availability1d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.99x10'
      - series: 'provider:proxy_operator_provider_target_up:availability7d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.995x10'
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.9995x10'
      - series: 'provider:proxy_operator_provider_target_up:availability7d{job="other-job", provider="kvm-lab"}'
        values: '0x10'
      - series: 'provider:proxy_operator_provider_target_up:coverage1d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.9x10'
      - series: 'provider:proxy_operator_provider_target_up:coverage7d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.95x10'
      - series: 'provider:proxy_operator_provider_target_up:coverage30d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.98x10'
      - series: 'provider:proxy_operator_provider_target_up:error_budget_left30d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.5x10'
      - series: 'provider_target:proxy_operator_provider_target_up:availability1d{job="provider-health-exporter", provider="kvm-lab", target="hv-1"}'
        values: '0.97x10'
      - series: 'provider_target:proxy_operator_provider_target_up:availability7d{job="provider-health-exporter", provider="kvm-lab", target="hv-1"}'
        values: '0.98x10'
      - series: 'provider_target:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-lab", target="hv-1"}'
        values: '0.9995x10'
      - series: 'provider_target:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-edge", target="hv-2"}'
        values: '0.999x10'
      - series: 'provider_target:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="gcp-prod", target="vm-1"}'
        values: '0.998x10'
      - series: 'provider_target:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="cluster-main", target="api"}'
        values: '1x10'
    promql_expr_test:
      - expr: '%[2]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.99
      - expr: '%[3]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.995
      - expr: '%[4]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.9995
      - expr: '%[5]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.9
      - expr: '%[6]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.95
      - expr: '%[7]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.98
      - expr: '%[8]s'
        eval_time: 10m
        exp_samples: &budget
          - labels: '{provider="kvm-lab"}'
            value: 0.5
      - expr: '%[9]s'
        eval_time: 10m
        exp_samples: *budget
      - expr: '%[10]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab", target="hv-1"}'
            value: 0.97
      - expr: '%[11]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab", target="hv-1"}'
            value: 0.98
      - expr: '%[12]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab", target="hv-1"}'
            value: 0.9995
          - labels: '{provider="kvm-edge", target="hv-2"}'
            value: 0.999
          - labels: '{provider="gcp-prod", target="vm-1"}'
            value: 0.998
          - labels: '{provider="cluster-main", target="api"}'
            value: 1
      - expr: '%[13]s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab", target="hv-1"}'
            value: 0.5000000000000555 # 0.5 in float64 arithmetic
          - labels: '{provider="kvm-edge", target="hv-2"}'
            value: %[1]s
          - labels: '{provider="gcp-prod", target="vm-1"}'
            value: -1
          - labels: '{provider="cluster-main", target="api"}'
            value: 1
`

// TestAvailabilityPanels: the availability table's columns (1d, 7d, 30d, their coverage, budget
// left), the error-budget graph and the per-target table of the committed dashboard compute
// what they say on Prometheus 3, for the default 99.9% objective over 30d: 1 - (1 -
// availability) / (1 - objective). Rendered with kvm-edge's objective at 99%, the per-target
// budget of its target at 99.9% is 0.9 (a tenth of its budget spent), the others unchanged.
func TestAvailabilityPanels(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	committed, err := os.ReadFile("dashboards_out/provider-health.json")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := goTool(t, "jsonnet", "-J", "mixin", "-m", out, "--tla-code", `config={availabilityObjectives: {"kvm-edge": 0.99}}`, "mixin/dashboards.jsonnet"); err != nil {
		t.Fatal(err)
	}
	overridden, err := os.ReadFile(filepath.Join(out, "provider-health.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		dashboard []byte
		edge      string
	}{
		{"default", committed, "0"},
		{"kvm-edge at 99%", overridden, "0.9"},
	} {
		exprs := availabilityQueries(t, c.dashboard)
		args := append([]any{c.edge}, exprs...)
		test := filepath.Join(t.TempDir(), "availability_panels_test.yaml")
		if err := os.WriteFile(test, []byte(fmt.Sprintf(availabilityPanelsTest, args...)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(pt, "test", "rules", test).CombinedOutput(); err != nil {
			t.Errorf("%s: the availability queries %q: %v\n%s", c.name, exprs, err, out)
		}
	}
}

// availabilityQueries returns the queries of the availability row, with the dashboard's
// variables set to every value: the provider table's 7, the budget graph's and the per-target
// table's 4.
func availabilityQueries(t *testing.T, raw []byte) []any {
	t.Helper()
	var d dashJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Availability per provider": 7, "Error budget left per provider": 1, "Availability per target": 4}
	var exprs []any
	for _, title := range []string{"Availability per provider", "Error budget left per provider", "Availability per target"} {
		found := false
		for _, p := range d.Panels {
			if p.Title != title {
				continue
			}
			found = true
			if len(p.Targets) != want[title] {
				t.Fatalf("%q has %d queries, want %d", title, len(p.Targets), want[title])
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
		}
		if !found {
			t.Fatalf("no panel %q", title)
		}
	}
	vars := strings.NewReplacer("$job", "provider-health-exporter", "$provider", ".*", "$target", ".*")
	for i, e := range exprs {
		exprs[i] = strings.ReplaceAll(vars.Replace(e.(string)), "'", "''")
	}
	return exprs
}

// availabilityObjectiveTest: the recorded budget left for kvm-edge (objective 99%) and kvm-lab
// (the default 99.9%), both 99.9% available over 30d: 0.9 and 0 (float64 arithmetic).
const availabilityObjectiveTest = `rule_files: [%q]
evaluation_interval: 5m
fuzzy_compare: true
tests:
  - interval: 5m
    input_series:
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-edge"}'
        values: '0.999x3'
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.999x3'
    promql_expr_test:
      - expr: provider:proxy_operator_provider_target_up:error_budget_left30d
        eval_time: 10m
        exp_samples:
          - labels: 'provider:proxy_operator_provider_target_up:error_budget_left30d{job="provider-health-exporter", provider="kvm-edge"}'
            value: 0.9
          - labels: 'provider:proxy_operator_provider_target_up:error_budget_left30d{job="provider-health-exporter", provider="kvm-lab"}'
            value: 0
`

// TestAvailabilityObjectives: a provider's own objective (availabilityObjectives) sets its
// recorded budget, the default everyone else's.
func TestAvailabilityObjectives(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, jsonnet(t, "rules.jsonnet", `{availabilityObjectives: {"kvm-edge": 0.99}}`, "-S"), 0o644); err != nil {
		t.Fatal(err)
	}
	test := filepath.Join(dir, "objective_test.yaml")
	if err := os.WriteFile(test, []byte(fmt.Sprintf(availabilityObjectiveTest, rules)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "test", "rules", test).CombinedOutput(); err != nil {
		t.Errorf("budget left with kvm-edge's objective at 99%%: %v\n%s", err, out)
	}
}
