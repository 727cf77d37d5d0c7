// Renders prometheus_rules.yaml (make mixin). The top-level argument config overrides _config.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  std.manifestYamlDoc(mixin.prometheusRules, quote_keys=false)
