// Renders dashboards_out/ (make mixin: jsonnet -m dashboards_out dashboards.jsonnet), one JSON
// file per dashboard. The top-level argument config overrides _config.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  mixin.grafanaDashboards
