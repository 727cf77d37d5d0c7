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
    // ProviderHealthTargetFlapping: more than flappingThreshold up/down changes in flappingWindow.
    flappingWindow: '30m',
    flappingThreshold: 4,
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
    // ProviderHealthExporterDown: critical (severities.exporterDown) when no replica is
    // scraped, a warning (severities.exporterReplicaDown) when one of several is not.
    exporterDownFor: '5m',

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

    // Availability (recording rules, dashboard row): every availabilityInterval one sample of
    // each target's verdict (up on any replica) is recorded; a target's availability over a
    // window is its up samples divided by the samples the window should hold, so a gap (the
    // exporter not scraped or not running, Prometheus down) counts as unavailable, and a
    // target without any sample in the window has no availability (never 100%). The windows are
    // single-unit durations; the availability rules are evaluated every
    // availabilityEvaluationInterval.
    availabilityInterval: '1m',
    availabilityEvaluationInterval: '5m',
    availabilityWindows: ['1d', '7d', '30d'],
    // The availability objective, and the window the dashboard's error budget is counted over.
    availabilityObjective: 0.999,
    availabilityBudgetWindow: '30d',

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
      checksStale: 'warning',
      checksSlow: 'warning',
      poolFillingUp: 'warning',
      poolAlmostFull: 'critical',
      hostKeyMismatch: 'critical',
      configReloadFailed: 'warning',
      exporterDown: 'critical',
      exporterReplicaDown: 'warning',
      crdWriteErrors: 'warning',
      crdWriterLagging: 'warning',
      crdWriterNoLeader: 'warning',
      crdNameClash: 'warning',
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
  },
}
