// deploy/prometheusrule.yaml: every alert and recording rule of the mixin (mixin/) as a
// Prometheus Operator PrometheusRule in the exporter's namespace, from the same jsonnet as
// mixin/prometheus_alerts.yaml and mixin/prometheus_rules.yaml. Regenerate with
// `make deploy-rules`; a test fails when the committed file drifts.
'# Generated from mixin/ by `make deploy-rules` (deploy/prometheusrule.jsonnet): do not edit.\n'
+ std.manifestYamlDoc(
  (import 'prometheus_rule.jsonnet')(namespace='provider-health-exporter'),
  indent_array_in_object=false,
  quote_keys=false,
) + '\n'
