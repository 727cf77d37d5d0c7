// Renders alertmanager/inhibit_rules.yaml (make mixin), the inhibit_rules block of an
// alertmanager.yml. The top-level argument config overrides _config.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  '# Generated from mixin/alertmanager/inhibit_rules.libsonnet by `make mixin`: do not edit.\n'
  + '# Merge inhibit_rules into your alertmanager.yml (see docs/mixin.md).\n'
  + std.manifestYamlDoc(mixin.alertmanagerInhibitRules, indent_array_in_object=false, quote_keys=false)
