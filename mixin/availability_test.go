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
// 10m. Provider kvm-lab's 30d availability is 0.9995 (half the 99.9% objective's budget left),
// kvm-edge's 0.999 (the budget spent, 0), gcp-prod's 0.998 (overspent twice: -1) and
// cluster-main's 1 (untouched: 1); kvm-lab's 1d and 7d are 0.99 and 0.995. The %s are the
// queries, in the order of the panels' targets.
const availabilityPanelsTest = `rule_files: []
evaluation_interval: 1m
fuzzy_compare: true
tests:
  - interval: 1m
    input_series:
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.9995x10'
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="kvm-edge"}'
        values: '0.999x10'
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="gcp-prod"}'
        values: '0.998x10'
      - series: 'provider:proxy_operator_provider_target_up:availability30d{job="provider-health-exporter", provider="cluster-main"}'
        values: '1x10'
      - series: 'provider:proxy_operator_provider_target_up:availability1d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.99x10'
      - series: 'provider:proxy_operator_provider_target_up:availability7d{job="provider-health-exporter", provider="kvm-lab"}'
        values: '0.995x10'
      - series: 'provider:proxy_operator_provider_target_up:availability7d{job="other-job", provider="kvm-lab"}'
        values: '0x10'
    promql_expr_test:
      - expr: '%s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.99
      - expr: '%s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.995
      - expr: '%s'
        eval_time: 10m
        exp_samples:
          - labels: '{provider="kvm-lab"}'
            value: 0.9995
          - labels: '{provider="kvm-edge"}'
            value: 0.999
          - labels: '{provider="gcp-prod"}'
            value: 0.998
          - labels: '{provider="cluster-main"}'
            value: 1
      - expr: '%s'
        eval_time: 10m
        exp_samples: &budget
          - labels: '{provider="kvm-lab"}'
            value: 0.5000000000000555 # 0.5 in float64 arithmetic
          - labels: '{provider="kvm-edge"}'
            value: 0
          - labels: '{provider="gcp-prod"}'
            value: -1
          - labels: '{provider="cluster-main"}'
            value: 1
      - expr: '%s'
        eval_time: 10m
        exp_samples: *budget
`

// TestAvailabilityPanels: the availability table's columns (1d, 7d, 30d, budget left) and the
// error-budget graph of the committed dashboard compute what they say on Prometheus 3, for the
// default 99.9% objective over 30d: 1 - (1 - availability) / (1 - objective).
func TestAvailabilityPanels(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	raw, err := os.ReadFile("dashboards_out/provider-health.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var exprs []any
	for _, p := range d.Panels {
		switch p.Title {
		case "Availability per provider":
			if len(p.Targets) != 4 {
				t.Fatalf("%q has %d queries, want 1d, 7d, 30d and budget left", p.Title, len(p.Targets))
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
		case "Error budget left per provider":
			if len(p.Targets) != 1 {
				t.Fatalf("%q has %d queries, want 1", p.Title, len(p.Targets))
			}
			exprs = append(exprs, p.Targets[0].Expr)
		}
	}
	if len(exprs) != 5 {
		t.Fatalf("found %d availability queries, want the provider table's 4 and the budget graph's 1", len(exprs))
	}
	vars := strings.NewReplacer("$job", "provider-health-exporter", "$provider", ".*", "$target", ".*")
	for i, e := range exprs {
		exprs[i] = strings.ReplaceAll(vars.Replace(e.(string)), "'", "''")
	}
	test := filepath.Join(t.TempDir(), "availability_panels_test.yaml")
	if err := os.WriteFile(test, []byte(fmt.Sprintf(availabilityPanelsTest, exprs...)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "test", "rules", test).CombinedOutput(); err != nil {
		t.Errorf("the availability queries %q: %v\n%s", exprs, err, out)
	}
}
