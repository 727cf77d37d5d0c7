// The provider-health-exporter monitoring mixin: _config, prometheusAlerts, prometheusRules,
// grafanaDashboards and alertmanagerInhibitRules, in the layout of node-mixin and
// kubernetes-mixin.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'alerts/burnrate.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet') +
(import 'alertmanager/inhibit_rules.libsonnet')
