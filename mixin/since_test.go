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

// sinceTest runs the "Since" column's query of the committed dashboard on Prometheus 3's rule
// engine (promtool test rules, promql_expr_test), over two exporter replicas:
//   - hv1 goes down on replica a only (10m to 20m) while b sees it up: the verdict the table
//     shows (the max over replicas) never flipped, so no Since;
//   - hv2 goes down on both at 11m (a) and 12m (b), the verdict flipping at 12m: 13m ago at 25m;
//   - hv3 is down at 11m only, so its verdict last flipped (back up) at 12m: 13m ago at 25m;
//   - hv4 never flips: no Since.
const sinceTest = `rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1"}'
        values: '1x10 0x10 1x10'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv1"}'
        values: '1x30'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv2"}'
        values: '1x10 0x20'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv2"}'
        values: '1x11 0x19'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv3"}'
        values: '1x10 0 1x19'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv4"}'
        values: '0x30'
    promql_expr_test:
      - expr: '%s'
        eval_time: 25m
        exp_samples:
          - labels: '{provider="kvm-lab", target="hv2"}'
            value: 780
          - labels: '{provider="kvm-lab", target="hv3"}'
            value: 780
`

// TestSinceColumn: the verdict table's Since column tells when the verdict it shows last
// flipped, not when one replica's did.
func TestSinceColumn(t *testing.T) {
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
	var expr string
	for _, p := range d.Panels {
		if p.Title == "Current verdicts" && len(p.Targets) == 4 {
			expr = p.Targets[2].Expr // refId C, the Since column
		}
	}
	if expr == "" {
		t.Fatal("no Current verdicts table with four queries")
	}
	q := strings.NewReplacer("$__range", "30m", "$job", "provider-health-exporter", "$provider", ".*", "$target", ".*").Replace(expr)
	dir := t.TempDir()
	test := filepath.Join(dir, "since_test.yaml")
	if err := os.WriteFile(test, []byte(fmt.Sprintf(sinceTest, strings.ReplaceAll(q, "'", "''"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "test", "rules", test).CombinedOutput(); err != nil {
		t.Errorf("the Since query %s: %v\n%s", q, err, out)
	}
}
