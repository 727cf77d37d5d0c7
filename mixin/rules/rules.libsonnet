// Recording rules, named level:metric:operations after the metric they read.
//
// provider-health-exporter.rules: what the dashboard and the alerts would otherwise both
// compute, the ready and total targets of each provider (replicas of one exporter deduplicated
// by max).
//
// provider-health-exporter.availability: the availability of each target and provider over
// _config.availabilityWindows. One group samples each target's verdict every
// availabilityInterval (the group's own interval, so the number of samples a window should hold
// is known: window / availabilityInterval); the other divides the up samples in each window by
// that number, over a window that ends one availabilityInterval ago. A missing sample (a gap)
// counts as not up; a target without any sample in a
// window has no series for it, rather than a made-up 100% (docs/mixin.md).
local promql = import '../lib/promql.libsonnet';

{
  prometheusRules+:: {
    local c = $._config,
    local perTarget = 'max ' + promql.by(c, ['job', 'provider', 'target']) + ' (' + promql.sel(c, 'proxy_operator_provider_target_up') + ')',
    local samples = 'provider_target:proxy_operator_provider_target_up:max',
    local interval = promql.seconds(c.availabilityInterval),
    local expected(window) =
      local w = promql.seconds(window);
      assert w % interval == 0 : 'availability window %s is not a multiple of availabilityInterval %s' % [window, c.availabilityInterval];
      w / interval,
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
      {
        name: 'provider-health-exporter.availability-samples',
        interval: c.availabilityInterval,
        rules: [
          { record: samples, expr: perTarget },
        ],
      },
      {
        name: 'provider-health-exporter.availability',
        interval: c.availabilityEvaluationInterval,
        rules: [
          {
            record: 'provider_target:proxy_operator_provider_target_up:availability' + w,
            // offset: the newest sample of the window is one a full availabilityInterval old,
            // so the result does not depend on whether this group or the samples group runs
            // first when both are due at the same instant (they are evaluated independently).
            expr: 'clamp_max(sum_over_time(%s[%s] offset %s) / %d, 1)' % [promql.sel(c, samples), w, c.availabilityInterval, expected(w)],
          }
          for w in c.availabilityWindows
        ] + [
          {
            record: 'provider:proxy_operator_provider_target_up:availability' + w,
            expr: 'avg %s (%s)' % [promql.by(c, ['job', 'provider']), promql.sel(c, 'provider_target:proxy_operator_provider_target_up:availability' + w)],
          }
          for w in c.availabilityWindows
        ],
      },
    ],
  },
}
