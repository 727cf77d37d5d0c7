// Recording rules: only what the dashboard and the alerts would otherwise both compute, the
// ready and total targets of each provider (replicas of one exporter deduplicated by max).
local promql = import '../lib/promql.libsonnet';

{
  prometheusRules+:: {
    local c = $._config,
    local perTarget = 'max ' + promql.by(c, ['job', 'provider', 'target']) + ' (' + promql.sel(c, 'proxy_operator_provider_target_up') + ')',
    groups+: [
      {
        name: 'provider-health-exporter.rules',
        rules: [
          {
            record: 'provider:proxy_operator_provider_target_up:sum',
            expr: 'sum ' + promql.by(c, ['job', 'provider']) + ' (' + perTarget + ')',
          },
          {
            record: 'provider:proxy_operator_provider_target_up:count',
            expr: 'count ' + promql.by(c, ['job', 'provider']) + ' (' + perTarget + ')',
          },
        ],
      },
    ],
  },
}
