// Renders prometheus_alerts.yaml (make mixin). The top-level argument config overrides _config:
//   jsonnet -S --tla-code 'config={targetDownFor: "30s"}' alerts.jsonnet
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  std.manifestYamlDoc(mixin.prometheusAlerts, quote_keys=false)
