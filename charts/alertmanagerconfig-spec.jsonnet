// charts/provider-health-exporter/files/alertmanagerconfig-spec.yaml: the spec of the mixin's
// AlertmanagerConfig (mixin/alertmanager_config.jsonnet, the same source as
// deploy/alertmanagerconfig.yaml), which the chart's templates/alertmanagerconfig.yaml includes
// with the release's job in place of the placeholder of chart_config.libsonnet.
// Regenerate with `make deploy-rules`; a test fails when the committed file drifts.
'# Generated from mixin/ by `make deploy-rules` (charts/alertmanagerconfig-spec.jsonnet): do not edit.\n'
+ std.manifestYamlDoc(
  (import 'alertmanager_config.jsonnet')(config=import 'chart_config.libsonnet').spec,
  indent_array_in_object=false,
  quote_keys=false,
) + '\n'
