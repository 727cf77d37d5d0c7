// charts/provider-health-exporter/files/prometheusrule-spec.yaml: the spec of the mixin's
// PrometheusRule (mixin/prometheus_rule.jsonnet, the same source as deploy/prometheusrule.yaml),
// which the chart's templates/prometheusrule.yaml includes with the release's job in place of
// the placeholder of chart_config.libsonnet. Regenerate with `make deploy-rules`; a test fails
// when the committed file drifts.
'# Generated from mixin/ by `make deploy-rules` (charts/prometheusrule-spec.jsonnet): do not edit.\n'
+ std.manifestYamlDoc(
  (import 'prometheus_rule.jsonnet')(config=import 'chart_config.libsonnet').spec,
  indent_array_in_object=false,
  quote_keys=false,
) + '\n'
