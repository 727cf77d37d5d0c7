// charts/provider-health-exporter/files/dashboards/: the mixin's dashboards (the same source as
// mixin/dashboards_out/), which the chart's templates/dashboards.yaml puts in a ConfigMap for
// Grafana's dashboard sidecar, with the release's job, dashboard uid and title in place of the
// placeholders of chart_config.libsonnet. Regenerate with `make deploy-rules`
// (jsonnet -m charts/provider-health-exporter/files/dashboards); a test fails when they drift.
(import 'dashboards.jsonnet')(config=import 'chart_config.libsonnet')
