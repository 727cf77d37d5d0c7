// Everything a user may want to change: selectors, windows, thresholds, severities, runbook
// links and the dashboard's identity. Override with
//   (import 'mixin.libsonnet') + { _config+:: { jobSelector: 'job="phe"' } }
{
  _config+:: {
    // Selects the exporter's series (every rule and dashboard query uses it).
    jobSelector: 'job="provider-health-exporter"',

    // Multi-cluster: when showMultiCluster is true, every aggregation keeps clusterLabel, so an
    // alert and a dashboard row are per cluster, and the dashboard shows a cluster variable.
    clusterLabel: 'cluster',
    showMultiCluster: false,

    // ProviderHealthTargetDown: a target's verdict has been down for this long.
    targetDownFor: '5m',
    // ProviderHealthProviderDown: every target of a provider has been down for this long.
    providerDownFor: '5m',
    // ProviderHealthProviderDown stays firing this long after its condition clears: at least
    // two evaluation intervals of the rule group (1m by default), so that the TargetDown alerts
    // it inhibits always resolve before it does, even when a scrape lands between the two
    // rules' queries of one evaluation (docs/mixin.md, "When the provider comes back").
    providerDownKeepFiringFor: '2m',
    // ProviderHealthTargetFlapping: more than flappingThreshold up/down changes in flappingWindow.
    flappingWindow: '30m',
    flappingThreshold: 4,
    // ProviderHealthTargetFailingChecks: more than failingChecksRatio of a target's own checks
    // (at least failingChecksMin of them) failed over failingChecksWindow, on every replica,
    // while its verdict stayed up.
    failingChecksWindow: '30m',
    failingChecksMin: 5,
    failingChecksRatio: 0.25,
    failingChecksFor: '10m',
    // ProviderHealthTargetUnchecked: a target listed more than uncheckedIntervals check
    // intervals ago still has no verdict.
    uncheckedIntervals: 3,
    targetUncheckedFor: '5m',
    // ProviderHealthChecksStale: the last check is older than staleIntervals check intervals.
    staleIntervals: 3,
    checksStaleFor: '5m',
    // ProviderHealthChecksSlow: checks take more than checksSlowRatio of the timeout.
    checksSlowRatio: 0.8,
    checksSlowFor: '15m',
    // ProviderHealthStoragePoolFillingUp: predict_linear over poolFillingLookback says the pool
    // is full within poolFillingHorizon, and less than poolFillingFreePercent is free.
    poolFillingLookback: '6h',
    poolFillingHorizon: '24h',
    poolFillingFreePercent: 20,
    poolFillingFor: '1h',
    // ProviderHealthStoragePoolAlmostFull: less than poolAlmostFullFreePercent is free.
    poolAlmostFullFreePercent: 5,
    poolAlmostFullFor: '5m',
    // The pool alerts read a pool's sizes as of its last successful read within this window: a
    // check that cannot read the pool (a host briefly unreachable) drops its series, which would
    // otherwise restart those alerts' for: timers; a pool unread for longer resolves them.
    poolReadGap: '10m',
    // ProviderHealthHostKeyMismatch.
    hostKeyMismatchFor: '1m',
    // ProviderHealthConfigReloadFailed.
    configReloadFailedFor: '10m',
    // ProviderHealthHostFileInvalid.
    hostFileInvalidFor: '10m',
    // ProviderHealthExporterDown: critical (severities.exporterDown) when no replica is
    // scraped, a warning (severities.exporterReplicaDown) when one of several is not.
    exporterDownFor: '5m',
    // The label selector of the exporter's pods, for the kubectl commands in alert texts:
    // deploy/'s and every Helm release's pods carry it, whatever the release's name (add
    // ,app.kubernetes.io/instance=RELEASE for one release of several in a namespace).
    podSelector: 'app.kubernetes.io/name=provider-health-exporter',

    // Sharding (--shard.enabled): its alerts read the proxy_operator_shard_* metrics, which
    // exist only where sharding is on, so they never fire without it.
    // ProviderHealthShardMembershipDisagrees: one replica saw more members than another
    // replica during the whole of shardMembersWindow, for shardMembersDisagreeFor.
    shardMembersWindow: '5m',
    shardMembersDisagreeFor: '5m',
    // ProviderHealthShardTargetsUnreported: targets of a provider that the configuration lists
    // and no replica reports. Keep it above two check intervals plus a scrape interval: a
    // replica that is killed leaves its targets unreported until its Lease expires and the new
    // owners' next round.
    shardTargetsUnreportedFor: '5m',
    // ProviderHealthShardPartNearlyFull: a replica's part (its verdicts, compressed) above
    // shardPartFullRatio of its bound for shardPartFullFor: past the bound, messages and then
    // verdicts are left out of the ProviderHealth objects and of a handover's carried counts.
    shardPartFullRatio: 0.75,
    shardPartFullFor: '15m',

    // The ProviderHealth writer (--crd.enabled): its alerts read the proxy_operator_crd_writer_*
    // metrics, which exist only where the writer is on, so they never fire without it.
    // ProviderHealthCRDWriteErrors: more than crdWriteErrorsRatio of the writer's writes to the
    // API server failed (errors; conflicts are part of normal operation) over crdWriteErrorsWindow.
    crdWriteErrorsWindow: '10m',
    crdWriteErrorsRatio: 0.1,
    crdWriteErrorsFor: '15m',
    // ProviderHealthCRDWriterLagging: the writing replica's last fully mirrored round is more than
    // crdWriterLagRounds behind its rounds of checks.
    crdWriterLagRounds: 2,
    crdWriterLagFor: '10m',
    // ProviderHealthCRDWriterNoLeader: no replica writes although checks are on. Above a
    // leader's takeover (at worst about 24s with the default lease, docs/crd.md).
    crdWriterNoLeaderFor: '5m',
    // ProviderHealthCRDNameClash: a configured provider's object name is held by another
    // instance's object (or one not managed by the exporter).
    crdNameClashFor: '15m',
    // ProviderHealthCRDDuplicateWriters: more than one write by another process of the writer's
    // own identity seen over crdDuplicateWritersWindow (one alone can be a fenced leader's last
    // write landing late, docs/crd.md).
    crdDuplicateWritersWindow: '15m',
    crdDuplicateWritersFor: '5m',

    // Availability (recording rules, dashboard row, error-budget alerts; docs/mixin.md#availability).
    // A target's availability over a window is the time it was seen up over the time it was
    // seen at all: a gap in monitoring (the exporter not scraped, Prometheus down) and time in
    // one of availabilityExcludedReasons count neither up nor down. A provider's weighs each
    // target by its own observed time (up target time over observed target time), and its
    // coverage is the share of the window in which any of its targets was observed.
    //
    // Every availabilityInterval one sample of each target's verdict (up on any replica) is
    // taken. Windows shorter than availabilityBucketedFrom are read from those samples;
    // longer ones (the cheap long windows) sum per-target counts of up and observed samples
    // recorded once per availabilityBucket (720 of them for 30d), in a group evaluated every
    // availabilityEvaluationInterval. Windows are single-unit durations, multiples of the
    // interval (short ones) or of the bucket (long ones).
    availabilityInterval: '1m',
    availabilityBucket: '1h',
    availabilityBucketedFrom: '1d',
    availabilityEvaluationInterval: '5m',
    // The windows of the availability (and coverage) series the dashboard shows, per target
    // and per provider.
    availabilityWindows: ['1d', '7d', '30d'],
    // Reasons whose time is left out of both up and observed time (a target_up 0 with one of
    // these reasons is not downtime).
    availabilityExcludedReasons: ['Maintenance'],
    // The availability objective (the share of observed target time up), per provider where
    // availabilityObjectives names it ({ 'kvm-lab': 0.99 }), and the window the error budget
    // is counted over (one of availabilityWindows).
    availabilityObjective: 0.999,
    availabilityObjectives: {},
    availabilityBudgetWindow: '30d',
    // Multi-window, multi-burn-rate alerts (the SRE workbook's): an alert fires when the error
    // budget burns faster than factor times the sustainable rate over both the long and the
    // short window of a pair. Fast burns page, slow burns open a ticket.
    availabilityBurnRates: {
      // fast's for: is longer than providerDownFor, so that a whole provider's outage pages
      // ProviderDown first and the inhibit rule mutes the burn alerts (one page per outage).
      fast: {
        severity: 'critical',
        'for': '6m',
        windows: [{ long: '1h', short: '5m', factor: 14.4 }, { long: '6h', short: '30m', factor: 6 }],
      },
      slow: {
        severity: 'warning',
        'for': '1h',
        windows: [{ long: '1d', short: '2h', factor: 3 }, { long: '3d', short: '6h', factor: 1 }],
      },
    },

    // The recommended Alertmanager route for the mixin's alerts (alertmanager/route.yaml,
    // docs/mixin.md): grouped by alertname, clusterLabel and provider, so one provider's targets
    // still down after a partial recovery are one notification; and its timings (Alertmanager's
    // defaults).
    alertmanagerGroupWait: '30s',
    alertmanagerGroupInterval: '5m',
    alertmanagerRepeatInterval: '4h',

    severities: {
      targetDown: 'warning',
      providerDown: 'critical',
      targetFlapping: 'warning',
      targetFailingChecks: 'warning',
      targetUnchecked: 'warning',
      checksStale: 'warning',
      checksSlow: 'warning',
      poolFillingUp: 'warning',
      poolAlmostFull: 'critical',
      hostKeyMismatch: 'critical',
      configReloadFailed: 'warning',
      hostFileInvalid: 'warning',
      exporterDown: 'critical',
      exporterReplicaDown: 'warning',
      shardMembershipDisagrees: 'warning',
      shardTargetsUnreported: 'warning',
      shardPartNearlyFull: 'warning',
      crdWriteErrors: 'warning',
      crdWriterLagging: 'warning',
      crdWriterNoLeader: 'warning',
      crdNameClash: 'warning',
      crdDuplicateWriters: 'warning',
    },

    // The runbook of an alert: this pattern with %s replaced by the alert's name in lower case
    // (the anchor of its section in docs/runbooks.md).
    runbookURLPattern: 'https://github.com/provider-health-exporter/provider-health-exporter/blob/main/docs/runbooks.md#%s',

    // The dashboard.
    dashboardUID: 'provider-health',
    dashboardTitle: 'Provider health',
    dashboardTags: ['provider-health-exporter'],
    dashboardRefresh: '1m',
    dashboardTimezone: 'utc',
    dashboardPeriod: '6h',
    // The job variable's value when the dashboard opens: null selects All (every job
    // jobSelector matches); a job's name selects that job (the Helm chart sets its release's).
    dashboardJobDefault: null,
    // Target labels (the exporter's target_info: a provider's and its targets' labels) the
    // dashboard filters the per-target panels by, one variable each, e.g. ['site', 'rack'].
    // "All" keeps every target, those without the label (or without labels) included; a value
    // keeps only the targets whose label has it.
    dashboardTargetLabels: [],
  },
}
