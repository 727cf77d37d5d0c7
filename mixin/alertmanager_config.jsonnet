// A Prometheus Operator AlertmanagerConfig (monitoring.coreos.com/v1alpha1) holding the mixin's
// inhibit rules, for deploy/. Top-level arguments: config overrides _config; name, namespace
// and labels of the object (give it the labels your Alertmanager's alertmanagerConfigSelector
// picks). The operator adds a namespace matcher to every inhibit rule unless the Alertmanager
// sets alertmanagerConfigMatcherStrategy None, and the mixin's alerts carry no namespace label:
// see docs/mixin.md.
function(config={}, name='provider-health-exporter', namespace='', labels={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  {
    apiVersion: 'monitoring.coreos.com/v1alpha1',
    kind: 'AlertmanagerConfig',
    metadata: {
      name: name,
      [if namespace != '' then 'namespace']: namespace,
      labels: { 'app.kubernetes.io/name': 'provider-health-exporter' } + labels,
    },
    spec: {
      inhibitRules: mixin.alertmanagerConfigInhibitRules,
    },
  }
