// The Provider health dashboard: current verdicts, their history, ready/total per provider,
// check timing, KVM storage pools, the exporter's own health and its shards.
local availability = import '../lib/availability.libsonnet';
local g = import '../lib/dashboard.libsonnet';
local promql = import '../lib/promql.libsonnet';

function(c)
  local multi = c.showMultiCluster;
  local cluster = if multi then [c.clusterLabel + '=~"$cluster"'] else [];
  // Series of the selected exporters, and of the selected providers and targets.
  local exp = std.join(', ', cluster + ['job=~"$job"']);
  local f = std.join(', ', cluster + ['job=~"$job"', 'provider=~"$provider"', 'target=~"$target"']);
  local fp = std.join(', ', cluster + ['job=~"$job"', 'provider=~"$provider"']);
  local by(labels) = promql.by(c, labels);
  local pt = by(['provider', 'target']);
  // The target-label filter (dashboardTargetLabels): the targets whose target_info matches
  // every label variable, and those without target_info (no labels) when every variable
  // matches an absent label (All is .*): target_up carries none of these labels, so a matcher
  // on it reads them as empty.
  local tl = c.dashboardTargetLabels;
  local lm = ['%s=~"$%s"' % [l, l] for l in tl];
  local onPT = 'on (%s)' % std.join(', ', promql.groupLabels(c, ['provider', 'target']));
  local labelled = 'group %s (proxy_operator_provider_target_info{%s})' % [pt, std.join(', ', [fp] + lm)];
  local unlabelled = 'group %s (proxy_operator_provider_target_up{%s} unless %s proxy_operator_provider_target_info{%s})' % [pt, std.join(', ', [f] + lm), onPT, fp];
  local lf(q) = if tl == [] then q else '(%s) and %s (%s or %s)' % [q, onPT, labelled, unlabelled];
  local ptp = by(['provider', 'target', 'pool']);
  // Availability (rules/rules.libsonnet): the error budget left over availabilityBudgetWindow,
  // for each provider's objective.
  assert std.member(c.availabilityWindows, c.availabilityBudgetWindow) : 'availabilityBudgetWindow %s is not one of availabilityWindows' % c.availabilityBudgetWindow;
  local obj = {
    bw: c.availabilityBudgetWindow,
    obj: '%.6g' % (c.availabilityObjective * 100),
    others: if c.availabilityObjectives == {} then '' else ' (' + std.join(', ', ['%s %.6g%%' % [p, c.availabilityObjectives[p] * 100] for p in std.objectFields(c.availabilityObjectives)]) + ')',
  };
  local nw = std.length(c.availabilityWindows);
  local col(i) = 'Value #' + std.char(std.codepoint('A') + i);
  local pct(name, decimals) = { matcher: { id: 'byName', options: name }, properties: [{ id: 'unit', value: 'percentunit' }, { id: 'decimals', value: decimals }] };
  local providerBudget = 'max %s (%s{%s})' % [by(['provider']), availability.name('provider', 'error_budget_left' + c.availabilityBudgetWindow), fp];
  local targetBudget = availability.budgetLeft(c, function(extra) 'max %s (%s{%s})' % [pt, availability.name('provider_target', 'availability' + c.availabilityBudgetWindow), std.join(', ', [f] + extra)]);

  g.dashboard(c.dashboardTitle,
              c.dashboardUID,
              c.dashboardTags,
              c.dashboardRefresh,
              c.dashboardTimezone,
              c.dashboardPeriod,
              'Verdicts of provider-health-exporter: which providers and targets are up, why not, since when, and whether the checks themselves are healthy.')
  .addVariables([
    g.datasourceVariable(),
    g.queryVariable('cluster', 'Cluster', 'label_values(proxy_operator_provider_info{%s}, %s)' % [c.jobSelector, c.clusterLabel], hide=if multi then 0 else 2),
    // All means every job the job selector matches, not every job Prometheus has.
    g.queryVariable('job', 'Job', 'label_values(proxy_operator_provider_info{%s}, job)' % std.join(', ', cluster + [c.jobSelector]), allValue=null, current=c.dashboardJobDefault),
    g.queryVariable('provider', 'Provider', 'label_values(proxy_operator_provider_info{%s}, provider)' % exp),
    g.queryVariable('target', 'Target', 'label_values(proxy_operator_provider_target_up{%s}, target)' % fp),
  ] + [
    g.queryVariable(l, l, 'label_values(proxy_operator_provider_target_info{%s}, %s)' % [fp, l], allValue='.*')
    for l in tl
  ])
  .addPanels(g.grid([
    g.row('Verdicts'),
    g.table(
      'Current verdicts',
      'One row per target: its verdict (up when any exporter replica sees it up), the reason of the last check, how long that verdict has held (since the replicas showing it last saw up/down flip, or first checked the target), and the age of the last check.',
      [
        g.target(lf('max %s (proxy_operator_provider_target_up{%s})' % [pt, f])),
        g.target(lf('max %s (proxy_operator_provider_target_reason{%s} == 1)' % [by(['provider', 'target', 'reason']), f])),
        // Since, from the exporters' own last-transition times (docs/mixin.md). Shown up: the
        // earliest flip to up among the replicas that see it up, each of which has seen it up
        // ever since (so one replica's restart or late flip does not move it). Shown down: the
        // latest flip to down among the replicas, all of which see it down, the moment the
        // last one went down.
        g.target(lf('time() - (min %(pt)s (proxy_operator_provider_target_last_transition_timestamp_seconds{%(f)s} and proxy_operator_provider_target_up{%(f)s} == 1) or (max %(pt)s (proxy_operator_provider_target_last_transition_timestamp_seconds{%(f)s}) unless max %(pt)s (proxy_operator_provider_target_up{%(f)s}) == 1))' % { pt: pt, f: f })),
        g.target(lf('time() - max %s (proxy_operator_provider_check_timestamp_seconds{%s})' % [pt, f])),
      ],
      columns=[
        ['provider', 'Provider'],
        ['target', 'Target'],
        ['Value #A', 'Up'],
        ['reason', 'Reason'],
        ['Value #C', 'Since'],
        ['Value #D', 'Last check age'],
      ],
      overrides=[
        { matcher: { id: 'byName', options: 'Up' }, properties: [
          { id: 'mappings', value: g.upMappings },
          { id: 'custom.cellOptions', value: { type: 'color-background' } },
        ] },
        { matcher: { id: 'byName', options: 'Since' }, properties: [{ id: 'unit', value: 's' }] },
        { matcher: { id: 'byName', options: 'Last check age' }, properties: [{ id: 'unit', value: 's' }] },
      ],
      sortBy=[{ displayName: 'Up', desc: false }],
    ) + { w: 24, h: 10 },
    g.stateTimeline(
      'Up over time',
      'Each target’s verdict over time (any exporter replica seeing it up counts as up).',
      [g.target(lf('max %s (proxy_operator_provider_target_up{%s})' % [pt, f]), '{{provider}} / {{target}}')],
    ) + { w: 24, h: 10 },
    g.timeseries(
      'Ready targets per provider',
      'Targets up and targets checked, per provider (recording rules of the mixin).',
      [
        g.target('max %s (provider:proxy_operator_provider_target_up:sum{%s})' % [by(['provider']), fp], '{{provider}} ready'),
        g.target('max %s (provider:proxy_operator_provider_target_up:count{%s})' % [by(['provider']), fp], '{{provider}} total'),
      ],
      min=0,
    ) + { w: 24 },
    g.row('Availability'),
    g.table(
      'Availability per provider',
      "Share of target time up over each window, out of the time each target was observed (recording rules of the mixin, docs/mixin.md): time without a verdict (a gap in monitoring) and time in %(excl)s count neither up nor down. Coverage is the share of the window in which any of the provider's targets was observed, so you know how much of the window the figure covers. Budget left is the error budget left over %(bw)s for the objective (%(obj)s%%%(others)s): 100%% untouched, 0%% spent, below 0 overspent. The windows end at the last hourly bucket, up to an hour ago." % (obj { excl: std.join(', ', c.availabilityExcludedReasons) }),
      [g.target('max %s (%s{%s})' % [by(['provider']), availability.name('provider', 'availability' + w), fp]) for w in c.availabilityWindows]
      + [g.target('max %s (%s{%s})' % [by(['provider']), availability.name('provider', 'coverage' + w), fp]) for w in c.availabilityWindows]
      + [g.target(providerBudget)],
      columns=[['provider', 'Provider']]
              + [[col(i), c.availabilityWindows[i]] for i in std.range(0, nw - 1)]
              + [[col(nw + i), 'Coverage ' + c.availabilityWindows[i]] for i in std.range(0, nw - 1)]
              + [[col(2 * nw), 'Budget left']],
      overrides=[pct(w, 3) for w in c.availabilityWindows]
                + [pct('Coverage ' + w, 1) for w in c.availabilityWindows]
                + [pct('Budget left', 1)],
      sortBy=[{ displayName: 'Budget left', desc: false }],
    ),
    g.timeseries(
      'Error budget left per provider',
      "Error budget left over %(bw)s for each provider's availability objective (%(obj)s%%%(others)s): 1 - (1 - availability) / (1 - objective). ProviderHealthErrorBudgetFastBurn and ...SlowBurn fire when it goes fast." % obj,
      [g.target(providerBudget, '{{provider}}')],
      unit='percentunit',
    ),
    g.table(
      'Availability per target',
      "Share of each target's observed time it was up over each window (gaps and excluded reasons left out); a target not observed at all in a window has no value for it (it is not shown as available).",
      [g.target('max %s (%s{%s})' % [pt, availability.name('provider_target', 'availability' + w), f]) for w in c.availabilityWindows]
      + [g.target(targetBudget)],
      columns=[['provider', 'Provider'], ['target', 'Target']]
              + [[col(i), c.availabilityWindows[i]] for i in std.range(0, nw - 1)]
              + [[col(nw), 'Budget left']],
      overrides=[pct(w, 3) for w in c.availabilityWindows] + [pct('Budget left', 1)],
      sortBy=[{ displayName: 'Budget left', desc: false }],
    ) + { w: 24, h: 10 },
    g.row('Checks'),
    g.timeseries(
      'Check duration against the timeout',
      'How long the last check of each target took, and the round timeout: a check that reaches it is abandoned and reads Timeout.',
      [
        g.target('max %s (proxy_operator_provider_check_duration_seconds{%s})' % [pt, f], '{{provider}} / {{target}}'),
        g.target('max %s (proxy_operator_provider_check_timeout_seconds{%s})' % [by(['job']), exp], 'timeout ({{job}})'),
      ],
      unit='s',
      min=0,
    ),
    g.timeseries(
      'Last check age',
      'Seconds since the last check of each target completed, and the staleness threshold of ProviderHealthChecksStale (%d check intervals).' % c.staleIntervals,
      [
        g.target('time() - max %s (proxy_operator_provider_check_timestamp_seconds{%s})' % [pt, f], '{{provider}} / {{target}}'),
        g.target('%d * max %s (proxy_operator_provider_check_interval_seconds{%s})' % [c.staleIntervals, by(['job']), exp], 'stale after ({{job}})'),
      ],
      unit='s',
      min=0,
    ),
    g.row('KVM storage pools'),
    g.timeseries(
      'Pool capacity and allocation',
      'Capacity and allocated bytes of each KVM host’s storage pool, as read by the last successful check.',
      [
        g.target('max %s (proxy_operator_kvm_storage_pool_capacity_bytes{%s})' % [ptp, f], '{{target}} {{pool}} capacity'),
        g.target('max %s (proxy_operator_kvm_storage_pool_allocation_bytes{%s})' % [ptp, f], '{{target}} {{pool}} allocated'),
      ],
      unit='bytes',
      min=0,
    ),
    g.timeseries(
      'Pool free space',
      'Share of each pool still available; ProviderHealthStoragePoolAlmostFull fires below %d%%.' % c.poolAlmostFullFreePercent,
      [
        g.target('max %s (proxy_operator_kvm_storage_pool_available_bytes{%s}) / max %s (proxy_operator_kvm_storage_pool_capacity_bytes{%s})' % [ptp, f, ptp, f], '{{target}} {{pool}}'),
      ],
      unit='percentunit',
      min=0,
      max=1,
    ),
    g.row('Exporter'),
    g.timeseries(
      'Scrape target up',
      'Whether Prometheus scrapes each exporter replica.',
      [g.target('up{%s}' % exp, '{{instance}}')],
      min=0,
      max=1,
    ) + { w: 8 },
    g.timeseries(
      'Rounds and abandoned checkers',
      'Rounds of checks completed, and checkers abandoned at a round’s deadline, per minute.',
      [
        g.target('60 * rate(proxy_operator_provider_check_rounds_total{%s}[$__rate_interval])' % exp, '{{instance}} rounds'),
        g.target('60 * rate(proxy_operator_provider_checkers_abandoned_total{%s}[$__rate_interval])' % exp, '{{instance}} abandoned'),
      ],
      unit='short',
      min=0,
    ) + { w: 8 },
    g.timeseries(
      'Round duration',
      'How long the last round took; at most the timeout plus a short grace.',
      [
        g.target('proxy_operator_provider_check_round_duration_seconds{%s}' % exp, '{{instance}}'),
      ],
      unit='s',
      min=0,
    ) + { w: 8 },
    g.timeseries(
      'Providers file reloads',
      'Whether the last load of the providers file succeeded (1) or failed (0) on each replica; after a failure the exporter keeps checking with the last good file.',
      [
        g.target('proxy_operator_config_last_reload_successful{%s}' % exp, '{{instance}} last reload successful'),
      ],
      min=0,
      max=1,
    ) + { w: 8 },
    g.timeseries(
      'KVM connection pool',
      'SSH connections open to KVM hosts, dials by result per minute, and probes abandoned on a hung libvirtd.',
      [
        g.target('sum %s (proxy_operator_kvm_pool_connections{%s})' % [by(['provider']), fp], '{{provider}} connections'),
        g.target('60 * sum %s (rate(proxy_operator_kvm_pool_dials_total{%s}[$__rate_interval]))' % [by(['provider', 'result']), fp], '{{provider}} dials {{result}}'),
        g.target('sum %s (proxy_operator_kvm_pool_abandoned_probes{%s})' % [by(['provider']), fp], '{{provider}} abandoned probes'),
      ],
      min=0,
    ) + { w: 8 },
    g.timeseries(
      'ProviderHealth writer',
      'Writes to the Kubernetes API by kind and result per minute, and which replica holds the lease.',
      [
        g.target('60 * sum %s (rate(proxy_operator_crd_writer_writes_total{%s}[$__rate_interval]))' % [by(['instance', 'kind', 'result']), exp], '{{instance}} {{kind}} {{result}}'),
        g.target('proxy_operator_crd_writer_leader{%s}' % exp, '{{instance}} leader'),
      ],
      min=0,
    ) + { w: 8 },
    g.row('Sharding'),
    g.timeseries(
      'Shard members',
      'Members of the shard each replica sees (--shard.enabled; no data without sharding). Replicas that see different numbers for long split the targets differently: ProviderHealthShardMembershipDisagrees.',
      [g.target('proxy_operator_shard_members{%s}' % exp, '{{instance}}')],
      unit='short',
      min=0,
    ) + { w: 12 },
    g.timeseries(
      'Owned targets',
      'Targets each replica checks and reports (its own and those it hands over), and the configured targets the replicas must cover between them: ProviderHealthShardTargetsUnreported fires when some are reported by none.',
      [
        g.target('sum %s (proxy_operator_shard_owned_targets{%s})' % [by(['instance']), fp], '{{instance}}'),
        g.target('sum %s (max %s (proxy_operator_shard_configured_targets{%s}))' % [by([]), by(['provider']), fp], 'configured'),
      ],
      unit='short',
      min=0,
    ) + { w: 12 },
  ]))
