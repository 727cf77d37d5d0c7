// Recording rules, named level:metric:operations after the metric they read.
//
// provider-health-exporter.rules: what the dashboard and the alerts would otherwise both
// compute, the ready and total targets of each provider (replicas of one exporter deduplicated
// by max).
//
// The availability groups (docs/mixin.md#availability): a target's availability over a window
// is the time it was seen up over the time it was seen at all, so a gap in monitoring and time
// in an excluded reason (Maintenance) count neither up nor down, and a provider's is its
// targets' up time over their observed time.
// - provider-health-exporter.availability-samples, every availabilityInterval: the merged
//   verdict of each target (absent while it is not observed), the up and observed targets of
//   each provider, and the short windows (below availabilityBucketedFrom: the burn-rate
//   alerts' 5m to 6h), read from those samples in the same group, so they are never late.
// - provider-health-exporter.availability-buckets, every availabilityBucket (1h): per target and
//   per provider, the up and observed samples of the last bucket, taken by a subquery of the
//   exporter's own series at availabilityInterval steps (it reads no other group, so it is
//   right whatever the placement of the groups); per provider, the samples in which any
//   target was observed (coverage).
// - provider-health-exporter.availability, every availabilityEvaluationInterval: the long
//   windows (1d, 7d, 30d, and the burn-rate alerts' 1d and 3d) as sums of those buckets, 720
//   per series for 30d, and the error budget left. They read the buckets as of one
//   availabilityInterval ago (offset): Prometheus places each group at its own offset within
//   its interval, so without it a long window evaluated as a bucket is written would hold one
//   bucket too few; with it, it always holds window / bucket of them. The long windows
//   therefore end at the last bucket, up to one bucket (plus that minute) ago.
local availability = import '../lib/availability.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  prometheusRules+:: {
    local c = $._config,
    local by(labels) = promql.by(c, labels),
    local on(labels) = 'on (' + std.join(', ', promql.groupLabels(c, labels)) + ')',
    local pt = ['job', 'provider', 'target'],
    local p = ['job', 'provider'],
    local name = availability.name,
    local sel(level, what, extra=[]) = promql.sel(c, name(level, what), extra),

    // The verdict of each target, merged over the exporter's replicas (up on any replica),
    // absent while no replica's verdict is known (a gap) and while no replica sees it up and
    // one gives it an excluded reason (Maintenance).
    local verdict = 'max %s (%s)' % [by(pt), promql.sel(c, 'proxy_operator_provider_target_up')],
    local excluded = 'max %s (%s == 1)' % [by(pt), promql.sel(c, 'proxy_operator_provider_target_reason', ['reason=~"%s"' % std.join('|', c.availabilityExcludedReasons)])],
    local observed = '%s unless %s (%s unless %s %s == 1)' % [verdict, on(pt), excluded, on(pt), verdict],

    local bucket = c.availabilityBucket,
    local step = c.availabilityInterval,
    local windows = availability.providerWindows(c),
    local short = [w for w in windows if !availability.bucketed(c, w)],
    local long = [w for w in windows if availability.bucketed(c, w)],
    local targetWindow(w) = std.member(c.availabilityWindows, w),

    local ratio(up, obs) = '%s / (%s > 0)' % [up, obs],

    assert std.member(c.availabilityWindows, c.availabilityBudgetWindow) : 'availabilityBudgetWindow %s is not one of availabilityWindows' % c.availabilityBudgetWindow,
    local budget = {
      record: name('provider', 'error_budget_left' + c.availabilityBudgetWindow),
      expr: availability.budgetLeft(c, function(extra) sel('provider', 'availability' + c.availabilityBudgetWindow, extra)),
    },
    local budgetShort = !availability.bucketed(c, c.availabilityBudgetWindow),

    groups+: [
      {
        name: 'provider-health-exporter.rules',
        rules: [
          {
            record: 'provider:proxy_operator_provider_target_up:sum',
            expr: 'sum ' + promql.by(c, ['job', 'provider']) + ' (' + verdict + ')',
          },
          {
            record: 'provider:proxy_operator_provider_target_up:count',
            expr: 'count ' + promql.by(c, ['job', 'provider']) + ' (' + verdict + ')',
          },
        ],
      },
      {
        name: 'provider-health-exporter.availability-samples',
        interval: step,
        rules: [
          { record: name('provider_target', 'max'), expr: observed },
          { record: name('provider', 'up_targets'), expr: 'sum %s (%s)' % [by(p), sel('provider_target', 'max')] },
          { record: name('provider', 'observed_targets'), expr: 'count %s (%s)' % [by(p), sel('provider_target', 'max')] },
        ] + std.flattenArrays([
          (if targetWindow(w) then [{
             record: name('provider_target', 'availability' + w),
             expr: ratio('sum_over_time(%s[%s])' % [sel('provider_target', 'max'), w], 'count_over_time(%s[%s])' % [sel('provider_target', 'max'), w]),
           }] else [])
          + [{
            record: name('provider', 'availability' + w),
            expr: ratio('sum_over_time(%s[%s])' % [sel('provider', 'up_targets'), w], 'sum_over_time(%s[%s])' % [sel('provider', 'observed_targets'), w]),
          }]
          + (if targetWindow(w) then [{
               record: name('provider', 'coverage' + w),
               expr: 'count_over_time(%s[%s]) / %d' % [sel('provider', 'observed_targets'), w, availability.samples(c, w)],
             }] else [])
          for w in short
        ]) + (if budgetShort then [budget] else []),
      },
      {
        name: 'provider-health-exporter.availability-buckets',
        interval: bucket,
        rules: [
          { record: name('provider_target', 'up_samples' + bucket), expr: 'sum_over_time((%s)[%s:%s])' % [observed, bucket, step] },
          { record: name('provider_target', 'observed_samples' + bucket), expr: 'count_over_time((%s)[%s:%s])' % [observed, bucket, step] },
          { record: name('provider', 'up_samples' + bucket), expr: 'sum %s (%s)' % [by(p), sel('provider_target', 'up_samples' + bucket)] },
          { record: name('provider', 'observed_samples' + bucket), expr: 'sum %s (%s)' % [by(p), sel('provider_target', 'observed_samples' + bucket)] },
          { record: name('provider', 'covered_samples' + bucket), expr: 'count_over_time((count %s (%s))[%s:%s])' % [by(p), observed, bucket, step] },
        ],
      },
      {
        name: 'provider-health-exporter.availability',
        interval: c.availabilityEvaluationInterval,
        local sum(level, what, w) = 'sum_over_time(%s[%s] offset %s)' % [sel(level, what + bucket), w, step],
        rules: std.flattenArrays([
          (if targetWindow(w) then [{
             record: name('provider_target', 'availability' + w),
             expr: ratio(sum('provider_target', 'up_samples', w), sum('provider_target', 'observed_samples', w)),
           }] else [])
          + [{
            record: name('provider', 'availability' + w),
            expr: ratio(sum('provider', 'up_samples', w), sum('provider', 'observed_samples', w)),
          }]
          + (if targetWindow(w) then [{
               record: name('provider', 'coverage' + w),
               expr: '%s / %d' % [sum('provider', 'covered_samples', w), availability.samples(c, w)],
             }] else [])
          for w in long
        ]) + (if budgetShort then [] else [budget]),
      },
    ],
  },
}
