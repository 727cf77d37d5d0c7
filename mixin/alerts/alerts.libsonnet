// The alerts. Every one aggregates over the exporter's replicas (two replicas checking the same
// target give one alert) and keeps only provider, target, pool or (a host file's) file, severity and, in
// multi-cluster mode, the cluster label. The current reason is never a label: it is read in the
// description by a template query, so a reason that changes while a target stays down neither
// restarts the alert's `for:` timer nor fires a second alert.
local promql = import '../lib/promql.libsonnet';

{
  prometheusAlerts+:: {
    local c = $._config,
    local by = function(labels) promql.by(c, labels),
    local sel = function(metric, extra=[]) promql.sel(c, metric, extra),
    local on = promql.on(c),

    // The label matchers of one alert's own series, for template queries: cluster (when on),
    // provider, target.
    local matchers(labels) = std.join(', ', [c.jobSelector] + [
      l + '=%q'
      for l in promql.groupLabels(c, labels)
    ]),
    local args(labels) = std.join(' ', ['$labels.' + l for l in promql.groupLabels(c, labels)]),
    // The argument of a template query on the exporter's series of the alert's own cluster
    // (when multi-cluster is on): metric{job selector, cluster} followed by rest.
    local exporterQuery(metric, rest) =
      if c.showMultiCluster
      then '(printf `' + metric + '{' + matchers([]) + '}' + rest + '` ' + args([]) + ')'
      else '`' + sel(metric) + rest + '`',
    // The instances where metric matches cond, as a template query.
    local instances(metric, cond) =
      '{{ range $i, $r := query ' + exporterQuery(metric, ' ' + cond)
      + ' | sortByLabel "instance" }}{{ if $i }}, {{ end }}{{ $r.Labels.instance }}{{ end }}',
    // The current reason(s) of the alert's target, as the exporter's replicas report it.
    local reason =
      '{{ range $i, $r := query (printf `max by (reason) (proxy_operator_provider_target_reason{'
      + matchers(['provider', 'target']) + '} == 1)` ' + args(['provider', 'target'])
      + ') | sortByLabel "reason" }}{{ if $i }}, {{ end }}{{ $r.Labels.reason }}{{ else }}unknown{{ end }}',

    // What to look at when the exporter is not scraped, for a deployment of any name: every
    // replica's state (OOMKilled) and logs, found by label.
    local exporterDownHelp =
      ' Look for OOMKilled in kubectl -n NAMESPACE get pods -l ' + c.podSelector
      + ' -o yaml, and read every replica: kubectl -n NAMESPACE logs -l ' + c.podSelector + ' --prefix --tail=-1 --previous.',

    // While a recovery is pending (the last checks answered Ready, fewer than successThreshold
    // of them), what the checks say now, beside the verdict's reason.
    local recoveryPending =
      '{{ with query (printf `max (proxy_operator_provider_target_consecutive_successes{'
      + matchers(['provider', 'target']) + '}) > 0` ' + args(['provider', 'target'])
      + ') }}; recovery pending: answering Ready, {{ . | first | value }} of {{ with query (printf `max (proxy_operator_provider_success_threshold{'
      + matchers(['provider']) + '})` ' + args(['provider'])
      + ') }}{{ . | first | value }}{{ else }}?{{ end }} successes{{ end }}',

    local alert(name, severityKey, expr, forWindow, summary, description, keepFiringFor=null) = {
      alert: name,
      expr: expr,
      [if forWindow != null then 'for']: forWindow,
      [if keepFiringFor != null then 'keep_firing_for']: keepFiringFor,
      labels: { severity: c.severities[severityKey] },
      annotations: {
        summary: summary,
        description: description,
        runbook_url: c.runbookURLPattern % std.asciiLower(name),
      },
    },

    // A target down on every replica, and a provider all of whose targets are down on every
    // replica: both from the raw series, never from a series recorded by another group.
    // A target in maintenance (reason Maintenance, on any replica) is deliberately out of
    // service: neither down alert counts it, and a provider whose other targets are all up (or
    // whose every target is in maintenance) is not down.
    local upOutsideMaintenance = '(%s unless on (%s) %s == 1)' % [
      sel('proxy_operator_provider_target_up'),
      std.join(', ', promql.groupLabels(c, ['provider', 'target'])),
      sel('proxy_operator_provider_target_reason', ['reason="Maintenance"']),
    ],
    local targetDownExpr = 'max %s %s == 0' % [by(['provider', 'target']), upOutsideMaintenance],
    local providerDownExpr = 'max %s %s == 0' % [by(['provider']), upOutsideMaintenance],
    // TargetDown leaves out a target of a provider down as a whole until the target has been
    // down for this window: targetDownFor, so that a target whose TargetDown fired before the
    // rest of its provider failed keeps it; at least providerDownFor, so that the TargetDown
    // alerts of an outage fire a full targetDownFor after its ProviderDown.
    local exclusionWindow =
      if promql.durationSeconds(c.providerDownFor) > promql.durationSeconds(c.targetDownFor)
      then c.providerDownFor else c.targetDownFor,

    local freePercent = '(max %(by)s (last_over_time(%(avail)s[%(gap)s])) / max %(by)s (last_over_time(%(cap)s[%(gap)s])) * 100)' % {
      by: by(['provider', 'target', 'pool']),
      gap: c.poolReadGap,
      avail: sel('proxy_operator_kvm_storage_pool_available_bytes'),
      cap: sel('proxy_operator_kvm_storage_pool_capacity_bytes'),
    },

    groups+: [
      {
        name: 'provider-health-exporter',
        rules: [
          // TargetDown leaves out the targets of a provider that is down as a whole, unless a
          // target had been down on its own for targetDownFor already (its TargetDown has fired
          // and stays, muted by the inhibit rule, rather than resolve while the target is
          // still down). It reads the same raw series as ProviderDown, in the same group, so
          // no placement of the rule groups and no order in which the targets go down lets a
          // TargetDown of a provider's outage fire before its ProviderDown (docs/mixin.md).
          alert(
            'ProviderHealthTargetDown',
            'targetDown',
            '%(down)s\nunless on (%(onTarget)s)\n(\n  max %(byTarget)s (max_over_time(%(up)s[%(window)s])) > 0\n  and on (%(onProvider)s)\n  %(providerDown)s\n)' % {
              down: targetDownExpr,
              onTarget: std.join(', ', promql.groupLabels(c, ['provider', 'target'])),
              byTarget: by(['provider', 'target']),
              up: sel('proxy_operator_provider_target_up'),
              window: exclusionWindow,
              onProvider: std.join(', ', promql.groupLabels(c, ['provider'])),
              providerDown: providerDownExpr,
            },
            c.targetDownFor,
            'A provider target has been down.',
            'Target {{ $labels.target }} of provider {{ $labels.provider }} has been down for more than '
            + c.targetDownFor + ' on every exporter replica; reason: ' + reason + recoveryPending + '.',
          ),
          alert(
            'ProviderHealthProviderDown',
            'providerDown',
            providerDownExpr,
            c.providerDownFor,
            'Every target of a provider has been down.',
            'All {{ with query (printf `count (max by (target) (proxy_operator_provider_target_up{'
            + matchers(['provider']) + '} unless on (target) proxy_operator_provider_target_reason{'
            + matchers(['provider']) + ', reason="Maintenance"} == 1))` ' + args(['provider']) + ' ' + args(['provider'])
            + ') }}{{ . | first | value }}{{ end }} targets of provider {{ $labels.provider }} have been down for more than '
            + c.providerDownFor + '; reasons: {{ range $i, $r := query (printf `count by (reason) (max by (target, reason) (proxy_operator_provider_target_reason{'
            + matchers(['provider']) + ', reason!="Maintenance"} == 1))` ' + args(['provider'])
            + ') | sortByLabel "reason" }}{{ if $i }}, {{ end }}{{ $r.Labels.reason }} ({{ $r.Value }}){{ end }}.',
            c.providerDownKeepFiringFor,
          ),
          alert(
            'ProviderHealthTargetFlapping',
            'targetFlapping',
            'max %s (changes(%s[%s])) > %d' % [by(['provider', 'target']), sel('proxy_operator_provider_target_up'), c.flappingWindow, c.flappingThreshold],
            null,
            'A provider target keeps changing between up and down.',
            'Target {{ $labels.target }} of provider {{ $labels.provider }} changed between up and down {{ $value }} times in the last '
            + c.flappingWindow + '; current reason: ' + reason + '.',
          ),
          // A target whose own checks fail often while its thresholded verdict stays up: a
          // failureThreshold of 3 hides a target failing two checks of every three from
          // TargetDown, TargetFlapping and availability. The ratio is each replica's own
          // (raw results, target_checks_failed_total over target_checks_total), on every
          // replica.
          alert(
            'ProviderHealthTargetFailingChecks',
            'targetFailingChecks',
            'min %(byTarget)s (\n  increase(%(failed)s[%(w)s])\n  /\n  (increase(%(total)s[%(w)s]) >= %(min)d)\n) > %(ratio)s\nand on (%(onTarget)s)\nmin %(byTarget)s (min_over_time(%(up)s[%(w)s])) == 1' % {
              byTarget: by(['provider', 'target']),
              onTarget: std.join(', ', promql.groupLabels(c, ['provider', 'target'])),
              failed: sel('proxy_operator_provider_target_checks_failed_total'),
              total: sel('proxy_operator_provider_target_checks_total'),
              up: sel('proxy_operator_provider_target_up'),
              w: c.failingChecksWindow,
              min: c.failingChecksMin,
              ratio: std.format('%g', c.failingChecksRatio),
            },
            c.failingChecksFor,
            'A provider target fails many of its checks while its verdict stays up.',
            '{{ $value | humanizePercentage }} of the checks of target {{ $labels.target }} of provider {{ $labels.provider }} failed over the last '
            + c.failingChecksWindow + ' on every exporter replica (threshold ' + std.toString(c.failingChecksRatio * 100)
            + "%), while its verdict stayed up: the failures never reached the provider's failureThreshold in a row, so TargetDown and the availability figures do not show them.",
          ),
          // A target the rounds have not contacted since the exporter listed it (its start or
          // the reload that added it), for several check intervals: the rounds' capacity
          // (concurrency, the round's timeout) is short of the fleet. It has no verdict, so no
          // other alert can fire for it.
          alert(
            'ProviderHealthTargetUnchecked',
            'targetUnchecked',
            'min %s ((time() - %s) / %s group_left () (%s > 0)) > %s\nunless on (%s)\n%s' % [
              by(['provider', 'target']),
              sel('proxy_operator_provider_target_unchecked_since_timestamp_seconds'),
              on,
              sel('proxy_operator_provider_check_interval_seconds'),
              c.uncheckedIntervals,
              std.join(', ', promql.groupLabels(c, ['provider', 'target'])),
              'max %s (%s)' % [by(['provider', 'target']), sel('proxy_operator_provider_target_up')],
            ],
            c.targetUncheckedFor,
            'A provider target has had no verdict for several check intervals.',
            'Target {{ $labels.target }} of provider {{ $labels.provider }} was listed {{ $value | printf "%.1f" }} check intervals ago (more than '
            + c.uncheckedIntervals + ") and has no verdict yet on any exporter replica: the rounds did not reach it (a provider's concurrency or the check timeout is short of its fleet), or its first checks have not met a threshold. It is neither up nor down, so no other alert can fire for it.",
          ),
          alert(
            'ProviderHealthChecksStale',
            'checksStale',
            'min %s ((time() - %s) / %s group_left () (%s > 0)) > %s' % [
              by(['provider', 'target']),
              sel('proxy_operator_provider_check_timestamp_seconds'),
              on,
              sel('proxy_operator_provider_check_interval_seconds'),
              c.staleIntervals,
            ],
            c.checksStaleFor,
            'The checks of a provider target have stopped.',
            'The last check of target {{ $labels.target }} of provider {{ $labels.provider }} is {{ $value | printf "%.1f" }} check intervals old on every exporter replica (more than '
            + c.staleIntervals + '); its verdict (' + reason + ') is no longer current.',
          ),
          alert(
            'ProviderHealthChecksSlow',
            'checksSlow',
            'max %s (%s / %s group_left () (%s > 0)) > %s' % [
              by(['provider']),
              sel('proxy_operator_provider_check_duration_seconds'),
              on,
              sel('proxy_operator_provider_check_timeout_seconds'),
              std.format('%g', c.checksSlowRatio),
            ],
            c.checksSlowFor,
            'The checks of a provider take most of the check timeout.',
            'The slowest check of provider {{ $labels.provider }} takes {{ $value | humanizePercentage }} of the check timeout (threshold '
            + std.toString(c.checksSlowRatio * 100) + '%){{ if lt $value 1.0 }}; a little slower and its targets read Timeout{{ else }}: its checks reach the timeout and are abandoned, so its targets read Timeout{{ end }}.',
          ),
          alert(
            'ProviderHealthStoragePoolFillingUp',
            'poolFillingUp',
            '%s < %s\nand\nmax %s (predict_linear(%s[%s], %s)) < 0' % [
              freePercent,
              c.poolFillingFreePercent,
              by(['provider', 'target', 'pool']),
              sel('proxy_operator_kvm_storage_pool_available_bytes'),
              c.poolFillingLookback,
              promql.seconds(c.poolFillingHorizon),
            ],
            c.poolFillingFor,
            'A KVM storage pool is predicted to fill up soon.',
            'Storage pool {{ $labels.pool }} on host {{ $labels.target }} (provider {{ $labels.provider }}) has {{ $value | printf "%.1f" }}% free and, at the rate of the last '
            + c.poolFillingLookback + ', is full within ' + c.poolFillingHorizon + '.',
          ),
          alert(
            'ProviderHealthStoragePoolAlmostFull',
            'poolAlmostFull',
            '%s < %s' % [freePercent, c.poolAlmostFullFreePercent],
            c.poolAlmostFullFor,
            'A KVM storage pool is almost full.',
            'Storage pool {{ $labels.pool }} on host {{ $labels.target }} (provider {{ $labels.provider }}) has only {{ $value | printf "%.1f" }}% free (threshold '
            + c.poolAlmostFullFreePercent + '%).',
          ),
          alert(
            'ProviderHealthHostKeyMismatch',
            'hostKeyMismatch',
            'max %s (%s) == 1' % [by(['provider', 'target']), sel('proxy_operator_provider_target_reason', ['reason="HostKeyMismatch"'])],
            c.hostKeyMismatchFor,
            'A KVM host presents a host key that does not match known_hosts.',
            'Host {{ $labels.target }} of provider {{ $labels.provider }} presents an SSH host key that does not match its known_hosts entry: either the host was reinstalled or its key rotated, or someone is in the middle of the connection. The exporter does not connect to it.',
          ),
          alert(
            'ProviderHealthConfigReloadFailed',
            'configReloadFailed',
            'min %s (%s) == 0' % [by([]), sel('proxy_operator_config_last_reload_successful')],
            c.configReloadFailedFor,
            'The exporter could not load its providers file.',
            'The last load of the providers file failed on ' + instances('proxy_operator_config_last_reload_successful', '== 0') + ' (for more than '
            + c.configReloadFailedFor + '); the exporter keeps checking with the last good file.',
          ),
          // A host file that does not read well on any replica: its provider keeps the hosts of
          // its last good read, and changes to the file are not applied.
          alert(
            'ProviderHealthHostFileInvalid',
            'hostFileInvalid',
            'min %s (%s) == 0' % [by(['provider', 'file']), sel('proxy_operator_host_file_last_read_successful')],
            c.hostFileInvalidFor,
            'A host file of a KVM provider cannot be read or is invalid.',
            'Host file {{ $labels.file }} of provider {{ $labels.provider }} has not read well on ' + instances('proxy_operator_host_file_last_read_successful', '== 0')
            + ' (for more than ' + c.hostFileInvalidFor + '): the exporter keeps checking the hosts of its last good read, and changes to the file are not applied. '
            + 'The status page and /api/v1/status show the problem with its line and column.',
          ),
          // ExporterDown pages (critical) when coverage is lost: no replica is scraped, or
          // Prometheus has no scrape target for the exporter at all. One replica down of
          // several is a warning: unsharded, the others still report every verdict; sharded,
          // a replica alive but not scraped hides its share of the targets, which its
          // description says. Both fire while every replica of several is down; the inhibit
          // rule mutes the warning then.
          alert(
            'ProviderHealthExporterDown',
            'exporterDown',
            'max %s (%s) == 0\nor\nsum %s (absent(%s))' % [by([]), sel('up'), by([]), sel('up')],
            c.exporterDownFor,
            'The provider health exporter is down or not scraped.',
            '{{ if eq $value 0.0 }}Prometheus cannot scrape the provider health exporter at ' + instances('up', '== 0')
            + ' (for more than ' + c.exporterDownFor + '): no replica is scraped, so no verdict is current and no provider alert can fire.'
            + '{{ else }}Prometheus has no scrape target matching ' + std.strReplace(c.jobSelector, '"', "'")
            + ' (for more than ' + c.exporterDownFor + '): no verdict is current and no provider alert can fire.{{ end }}' + exporterDownHelp,
          ),
          alert(
            'ProviderHealthExporterDown',
            'exporterReplicaDown',
            'min %s (%s) == 0\nand\ncount %s (%s) > 1' % [by([]), sel('up'), by([]), sel('up')],
            c.exporterDownFor,
            'A replica of the provider health exporter is down or not scraped.',
            'Prometheus cannot scrape the provider health exporter at ' + instances('up', '== 0')
            + ' (for more than ' + c.exporterDownFor + ')'
            + '{{ with query (printf "count(%s)" ' + exporterQuery('up', ' == 1') + ') }}'
            + '; {{ . | first | value }} other replicas are scraped. Sharded (--shard.enabled, the default of the chart and deploy/), a replica that runs but is not scraped still owns its share of the targets (about 1/N of the fleet): their verdicts are missing and their alerts cannot fire until it is scraped again or stops. Unsharded, the others report every verdict.'
            + '{{ else }}; no replica is scraped now.{{ end }}' + exporterDownHelp,
          ),
          // Sharding (--shard.enabled). Its metrics exist only where sharding is on, so an
          // unsharded deployment never fires these.
          //
          // Replicas disagree on the members when one replica saw more members than another
          // during the whole window: the heaviest of the replicas' lowest counts is above the
          // lightest of their highest. A plain max - min > 0 is not robust to a rollout: it
          // changes the members step by step, replicas see each step a retry period apart and
          // Prometheus scrapes them at different moments, so two replicas can differ by one
          // step at every evaluation of a long rollout. Over the window each of them has seen
          // both counts and nothing fires; a replica stuck on its own count (it cannot list
          // the Leases, or its clock judges them otherwise) stays apart and fires. Only the
          // replicas reporting now take part (`and` the current series): a replica that left
          // keeps its old samples in the window. A replica that has just started reports 1
          // until it first reaches the API server; the for: covers that.
          alert(
            'ProviderHealthShardMembershipDisagrees',
            'shardMembershipDisagrees',
            'max %(by)s (min_over_time(%(m)s[%(w)s]) and %(m)s)\n>\nmin %(by)s (max_over_time(%(m)s[%(w)s]) and %(m)s)' % {
              by: by([]),
              m: sel('proxy_operator_shard_members'),
              w: c.shardMembersWindow,
            },
            c.shardMembersDisagreeFor,
            'The replicas of a sharded exporter disagree on the shard members.',
            'The replicas of the sharded exporter have seen different numbers of shard members for more than '
            + c.shardMembersWindow + ' (members seen now: '
            + '{{ range $i, $r := query ' + exporterQuery('proxy_operator_shard_members', '') + ' | sortByLabel "instance" }}{{ if $i }}, {{ end }}{{ $r.Labels.instance }}: {{ $r.Value }}{{ end }}'
            + '): they split the targets differently, so some are checked twice and some may be checked by none (ProviderHealthShardTargetsUnreported).',
          ),
          // Targets of a provider that its configuration lists (on any replica) and no replica
          // reports: the number of distinct targets with a target_checks_total series (a
          // target has one from the moment a replica lists it, verdict or not) on any replica
          // is below the configured count. Distinct targets, not a sum of owned_targets: an
          // old owner keeps reporting a target for two intervals after it moved (make before
          // break), and that duplicate must not hide a gap elsewhere. A provider none of whose
          // targets any replica reports counts 0 (the `or`).
          alert(
            'ProviderHealthShardTargetsUnreported',
            'shardTargetsUnreported',
            'max %(byP)s (%(configured)s)\n-\n(\n  count %(byP)s (max %(byPT)s (%(listed)s))\n  or\n  max %(byP)s (%(configured)s) * 0\n)\n> 0' % {
              byP: by(['provider']),
              byPT: by(['provider', 'target']),
              configured: sel('proxy_operator_shard_configured_targets'),
              listed: sel('proxy_operator_provider_target_checks_total'),
            },
            c.shardTargetsUnreportedFor,
            'Configured targets of a sharded exporter are reported by no replica.',
            '{{ $value }} of the configured targets of provider {{ $labels.provider }} have been reported by no replica of the sharded exporter for more than '
            + c.shardTargetsUnreportedFor + ': no replica checks them, so no alert can fire for them. Replicas: '
            + '{{ range $i, $r := query (printf `' + 'proxy_operator_shard_owned_targets{' + matchers(['provider']) + '}` ' + args(['provider'])
            + ') | sortByLabel "instance" }}{{ if $i }}, {{ end }}{{ $r.Labels.instance }} reports {{ $r.Value }}{{ end }}.',
          ),
          // A replica's part nearly at its bound (1 MiB compressed): past it, messages and then
          // verdicts are left out of what the others read. Per replica (the one that holds too
          // many verdicts), the largest ratio named.
          alert(
            'ProviderHealthShardPartNearlyFull',
            'shardPartNearlyFull',
            'max %(by)s (%(bytes)s / %(max)s) > %(ratio)s' % {
              by: by([]),
              bytes: sel('proxy_operator_shard_part_bytes'),
              max: sel('proxy_operator_shard_part_max_bytes'),
              ratio: std.format('%g', c.shardPartFullRatio),
            },
            c.shardPartFullFor,
            "A sharded replica's part is nearly at its bound.",
            'The largest part of a replica of the sharded exporter holds {{ $value | humanizePercentage }} of its bound (proxy_operator_shard_part_max_bytes) for more than '
            + c.shardPartFullFor + ': past the bound its messages, then verdicts, are left out of the ProviderHealth objects and of the counts a new owner carries. Run more replicas.',
          ),
          // The ProviderHealth writer. Its metrics exist only where --crd.enabled is on; with
          // leader election only the leader writes, so the writing replica is the one whose
          // proxy_operator_crd_writer_leader is 1.
          alert(
            'ProviderHealthCRDWriteErrors',
            'crdWriteErrors',
            'sum %(by)s (rate(%(errors)s[%(w)s]))\n/\nsum %(by)s (rate(%(all)s[%(w)s]))\n> %(ratio)s' % {
              by: by([]),
              errors: sel('proxy_operator_crd_writer_writes_total', ['result="error"']),
              all: sel('proxy_operator_crd_writer_writes_total'),
              w: c.crdWriteErrorsWindow,
              ratio: std.format('%g', c.crdWriteErrorsRatio),
            },
            c.crdWriteErrorsFor,
            'The ProviderHealth writer fails to write to the Kubernetes API.',
            '{{ $value | humanizePercentage }} of the ProviderHealth writes to the Kubernetes API failed over the last '
            + c.crdWriteErrorsWindow + ' (threshold ' + std.toString(c.crdWriteErrorsRatio * 100)
            + '%, conflicts not counted), for more than ' + c.crdWriteErrorsFor
            + '; the ProviderHealth objects fall behind the verdicts. Writing replica: '
            + instances('proxy_operator_crd_writer_leader', '== 1') + '.',
          ),
          alert(
            'ProviderHealthCRDWriterLagging',
            'crdWriterLagging',
            'max %(by)s (\n  (%(rounds)s - %(on)s %(synced)s)\n  and %(on)s (%(leader)s == 1)\n)\n> %(lag)d' % {
              by: by([]),
              on: on,
              rounds: sel('proxy_operator_provider_check_rounds_total'),
              synced: sel('proxy_operator_crd_writer_synced_round'),
              leader: sel('proxy_operator_crd_writer_leader'),
              lag: c.crdWriterLagRounds,
            },
            c.crdWriterLagFor,
            'The ProviderHealth objects lag behind the checks.',
            'The ProviderHealth writer on ' + instances('proxy_operator_crd_writer_leader', '== 1')
            + ' has mirrored no round of checks for {{ $value }} rounds (more than ' + c.crdWriterLagRounds
            + ', for more than ' + c.crdWriterLagFor + '): the ProviderHealth objects show older verdicts than the metrics.',
          ),
          alert(
            'ProviderHealthCRDWriterNoLeader',
            'crdWriterNoLeader',
            'max %(by)s (%(leader)s) == 0\nand\nmax %(by)s (%(interval)s) > 0' % {
              by: by([]),
              leader: sel('proxy_operator_crd_writer_leader'),
              interval: sel('proxy_operator_provider_check_interval_seconds'),
            },
            c.crdWriterNoLeaderFor,
            'No replica writes the ProviderHealth objects.',
            'The ProviderHealth writer is on but none of its replicas ('
            + instances('proxy_operator_crd_writer_leader', '== 0') + ') has been writing for more than '
            + c.crdWriterNoLeaderFor + ' (none holds the Lease): the ProviderHealth objects are not updated.',
          ),
          alert(
            'ProviderHealthCRDNameClash',
            'crdNameClash',
            'max %s (%s) > 0' % [by([]), sel('proxy_operator_crd_writer_name_clashes')],
            c.crdNameClashFor,
            'A provider has no ProviderHealth object: another object holds its name.',
            '{{ $value }} configured provider(s) of the exporter on ' + instances('proxy_operator_crd_writer_name_clashes', '> 0')
            + " have a ProviderHealth object name held by another exporter instance's object (or one not managed by the exporter), for more than "
            + c.crdNameClashFor + ': those objects are left alone and these providers have none of their own.',
          ),
          alert(
            'ProviderHealthCRDDuplicateWriters',
            'crdDuplicateWriters',
            'sum %s (increase(%s[%s])) > 1' % [by([]), sel('proxy_operator_crd_writer_other_writer_writes_total'), c.crdDuplicateWritersWindow],
            c.crdDuplicateWritersFor,
            'Two ProviderHealth writers with one identity overwrite each other.',
            'The ProviderHealth writer on ' + instances('proxy_operator_crd_writer_other_writer_writes_total', '> 0')
            + ' keeps finding its objects written by another exporter process of the same identity (more than one such write over the last '
            + c.crdDuplicateWritersWindow + ', for more than ' + c.crdDuplicateWritersFor
            + '): replicas without --crd.leader-elect, or two deployments with the same instance and Lease, overwrite each other, alternate lastTransitionTime and double the Events.',
          ),
        ],
      },
    ],
  },
}
