// deploy/alertmanagerconfig.yaml: the mixin's Alertmanager inhibit rules (mixin/) as a
// Prometheus Operator AlertmanagerConfig in the exporter's namespace, from the same jsonnet as
// mixin/alertmanager/inhibit_rules.yaml. Regenerate with `make deploy-rules`; a test fails when
// the committed file drifts.
'# Generated from mixin/ by `make deploy-rules` (deploy/alertmanagerconfig.jsonnet): do not edit.\n'
+ std.manifestYamlDoc(
  (import 'alertmanager_config.jsonnet')(namespace='provider-health-exporter'),
  indent_array_in_object=false,
  quote_keys=false,
) + '\n'
