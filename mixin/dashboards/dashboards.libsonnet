{
  grafanaDashboards+:: {
    'provider-health.json': (import 'provider-health.libsonnet')($._config),
  },
}
