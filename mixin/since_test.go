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
// engine (promtool test rules, promql_expr_test), over two exporter replicas a and b, each
// exporting target_up and target_last_transition_timestamp_seconds (which the exporter keeps at
// the check that saw the last flip, or at its own first check of the target) every minute; the
// query is evaluated at 25m (1500 s):
//   - hv1: a went down at 10m, b (started at 1m) has seen it up since: the verdict shown is up,
//     and has been since b's 60 s, not a's flip: 1440 s;
//   - hv2: both up since 0; a restarted at 20m and counts from its first check at 21m: one
//     replica's restart does not move the verdict's time: 1500 s;
//   - hv3: down at 11m on a and 12m on b: the verdict flipped when the last one went down,
//     12m: 780 s;
//   - hv4: both down at 10m, back up on a at 15m: up since 15m (b's down time is not the
//     up verdict's): 600 s;
//   - hv5: up on a since 5m and on b since 14m: up since the earlier, 5m: 1200 s;
//   - hv6: a (a newer exporter) down since 10m, b (an older one without the transition gauge)
//     up: the verdict is up and nothing tells since when, so no value rather than a's down time;
//   - hv7: checked by a only, down since 17m: 480 s.
const sinceTest = `rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1"}'
        values: '1x9 0x20'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1"}'
        values: '0x9 600x20'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv1"}'
        values: '_ 1x29'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv1"}'
        values: '_ 60x29'

      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv2"}'
        values: '1x19 _ 1x9'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv2"}'
        values: '0x19 _ 1260x9'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv2"}'
        values: '1x30'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv2"}'
        values: '0x30'

      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv3"}'
        values: '1x10 0x19'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv3"}'
        values: '0x10 660x19'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv3"}'
        values: '1x11 0x18'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv3"}'
        values: '0x11 720x18'

      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv4"}'
        values: '1x9 0x4 1x15'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv4"}'
        values: '0x9 600x4 900x15'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv4"}'
        values: '1x9 0x20'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv4"}'
        values: '0x9 600x20'

      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv5"}'
        values: '0x4 1x25'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv5"}'
        values: '0x4 300x25'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv5"}'
        values: '0x13 1x16'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv5"}'
        values: '0x13 840x16'

      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv6"}'
        values: '1x9 0x20'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv6"}'
        values: '0x9 600x20'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="b:9847", provider="kvm-lab", target="hv6"}'
        values: '1x30'

      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv7"}'
        values: '1x16 0x13'
      - series: 'proxy_operator_provider_target_last_transition_timestamp_seconds{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv7"}'
        values: '0x16 1020x13'
    promql_expr_test:
      - expr: '%s'
        eval_time: 25m
        exp_samples:
          - labels: '{provider="kvm-lab", target="hv1"}'
            value: 1440
          - labels: '{provider="kvm-lab", target="hv2"}'
            value: 1500
          - labels: '{provider="kvm-lab", target="hv3"}'
            value: 780
          - labels: '{provider="kvm-lab", target="hv4"}'
            value: 600
          - labels: '{provider="kvm-lab", target="hv5"}'
            value: 1200
          - labels: '{provider="kvm-lab", target="hv7"}'
            value: 480
`

// TestSinceColumn: the verdict table's Since column tells since when the verdict it shows (the
// max over replicas) holds, from the exporters' own transition times: not one replica's flip
// the verdict does not show, nor one replica's restart.
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

// labelFilterTest evaluates the verdict table's up query of a dashboard rendered with
// dashboardTargetLabels ['rack'] at 5m, for one value of $rack: hv1 has rack r1, hv2 rack r2, hv3
// labels without a rack (site only), hv4 no labels at all (no target_info series).
const labelFilterTest = `rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1"}'
        values: '1x10'
      - series: 'proxy_operator_provider_target_info{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv1", rack="r1", site="fra1"}'
        values: '1x10'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv2"}'
        values: '0x10'
      - series: 'proxy_operator_provider_target_info{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv2", rack="r2"}'
        values: '1x10'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv3"}'
        values: '1x10'
      - series: 'proxy_operator_provider_target_info{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv3", site="fra1"}'
        values: '1x10'
      - series: 'proxy_operator_provider_target_up{job="provider-health-exporter", instance="a:9847", provider="kvm-lab", target="hv4"}'
        values: '0x10'
    promql_expr_test:
      - expr: '%s'
        eval_time: 5m
        exp_samples:
%s`

// TestDashboardTargetLabelFilter: with dashboardTargetLabels, "All" (.*) keeps every target,
// labelled or not, and a value keeps exactly the targets whose label has it, on Prometheus's
// own engine.
func TestDashboardTargetLabelFilter(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	out := jsonnet(t, "dashboards.jsonnet", `{dashboardTargetLabels: ["rack"]}`)
	var byFile map[string]json.RawMessage
	if err := json.Unmarshal(out, &byFile); err != nil {
		t.Fatal(err)
	}
	checkDashboard(t, byFile["provider-health.json"], false)
	var d dashJSON
	if err := json.Unmarshal(byFile["provider-health.json"], &d); err != nil {
		t.Fatal(err)
	}
	var expr string
	for _, p := range d.Panels {
		if p.Title == "Current verdicts" {
			expr = p.Targets[0].Expr
		}
	}
	if !strings.Contains(expr, `rack=~"$rack"`) {
		t.Fatalf("the up query does not filter by $rack: %s", expr)
	}
	sample := func(target string, v int) string {
		return fmt.Sprintf("          - labels: '{provider=\"kvm-lab\", target=\"%s\"}'\n            value: %d\n", target, v)
	}
	for rack, want := range map[string]string{
		".*": sample("hv1", 1) + sample("hv2", 0) + sample("hv3", 1) + sample("hv4", 0),
		"r1": sample("hv1", 1),
		"r2": sample("hv2", 0),
		"r9": "          []\n",
	} {
		q := strings.NewReplacer("$job", "provider-health-exporter", "$provider", ".*", "$target", ".*", "$rack", rack).Replace(expr)
		body := fmt.Sprintf(labelFilterTest, strings.ReplaceAll(q, "'", "''"), want)
		if rack == "r9" {
			body = strings.Replace(body, "exp_samples:\n          []\n", "exp_samples: []\n", 1)
		}
		test := filepath.Join(t.TempDir(), "filter_test.yaml")
		if err := os.WriteFile(test, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(pt, "test", "rules", test).CombinedOutput(); err != nil {
			t.Errorf("rack %s: %v\n%s", rack, err, out)
		}
	}
}
