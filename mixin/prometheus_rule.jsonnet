// A Prometheus Operator PrometheusRule holding every alert and recording rule of the mixin,
// for deploy/ (as JSON, which kubectl and kustomize accept, or YAML with -S and
// std.manifestYamlDoc around it). Top-level arguments:
//   config     overrides _config (e.g. short `for:` windows for an end-to-end test)
//   name, namespace, labels  of the object
//   jsonnet --tla-code 'config={targetDownFor: "30s"}' --tla-str namespace=monitoring prometheus_rule.jsonnet
function(config={}, name='provider-health-exporter', namespace='', labels={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: name,
      [if namespace != '' then 'namespace']: namespace,
      labels: { 'app.kubernetes.io/name': 'provider-health-exporter' } + labels,
    },
    spec: {
      groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups,
    },
  }
