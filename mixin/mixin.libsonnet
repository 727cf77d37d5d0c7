// The provider-health-exporter monitoring mixin: _config, prometheusAlerts, prometheusRules
// and grafanaDashboards, in the layout of node-mixin and kubernetes-mixin.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
