// Renders alertmanager/route.yaml (make mixin), the recommended Alertmanager route for the
// mixin's alerts. The top-level argument config overrides _config.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  '# Generated from mixin/alertmanager/inhibit_rules.libsonnet by `make mixin`: do not edit.\n'
  + "# The recommended route for the mixin's alerts: add it to the routes of your alertmanager.yml's\n"
  + '# top-level route (it inherits that receiver), before any route that would catch them (see docs/mixin.md).\n'
  + std.manifestYamlDoc({ routes: [mixin.alertmanagerRoute] }, indent_array_in_object=false, quote_keys=false)
