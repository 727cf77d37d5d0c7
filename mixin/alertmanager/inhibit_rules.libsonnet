// Alertmanager inhibit rules, and the recommended route for the mixin's alerts.
//
// While a provider is down as a whole (ProviderHealthProviderDown), the TargetDown alerts of
// its targets are muted, so an outage pages once; while no exporter replica is scraped
// (ProviderHealthExporterDown, critical), the warning that one replica is down is muted.
// The rules' equal always holds the cluster label: Prometheus adds its external labels (the
// cluster) to every alert it sends, whatever the alert's expression aggregated away, and
// Alertmanager treats a label missing on both alerts as equal, so a provider down in one
// cluster never mutes a provider of the same name in another, multi-cluster mode or not.
//
// inhibitRules is the one list; alertmanagerInhibitRules renders it for alertmanager.yml
// (alertmanager/inhibit_rules.yaml), alertmanagerConfigInhibitRules for a Prometheus Operator
// AlertmanagerConfig (monitoring.coreos.com/v1alpha1, deploy/alertmanagerconfig.yaml).
// alertmanagerRoute is the recommended route (alertmanager/route.yaml).
{
  local c = $._config,
  local matcher(name, value) = { name: name, matchType: '=', value: value },

  inhibitRules+:: [
    {
      source: [matcher('alertname', 'ProviderHealthProviderDown')],
      target: [matcher('alertname', 'ProviderHealthTargetDown')],
      equal: [c.clusterLabel, 'provider'],
    },
    // A provider down as a whole burns its error budget as fast as it can: ProviderDown is the
    // page, and the burn alerts (whose fast for: outlasts providerDownFor) are muted.
    {
      source: [matcher('alertname', 'ProviderHealthProviderDown')],
      target: [matcher('alertname', 'ProviderHealthErrorBudgetFastBurn')],
      equal: [c.clusterLabel, 'provider'],
    },
    {
      source: [matcher('alertname', 'ProviderHealthProviderDown')],
      target: [matcher('alertname', 'ProviderHealthErrorBudgetSlowBurn')],
      equal: [c.clusterLabel, 'provider'],
    },
    {
      source: [matcher('alertname', 'ProviderHealthExporterDown'), matcher('severity', c.severities.exporterDown)],
      target: [matcher('alertname', 'ProviderHealthExporterDown'), matcher('severity', c.severities.exporterReplicaDown)],
      equal: [c.clusterLabel],
    },
  ],
  assert c.severities.exporterDown != c.severities.exporterReplicaDown :
         'severities.exporterDown and severities.exporterReplicaDown must differ: the inhibit rule tells the two ExporterDown alerts apart by severity',

  // The recommended route: a child route for the mixin's alerts, to put under the top-level
  // route of alertmanager.yml (it inherits that route's receiver). group_by holds alertname,
  // the cluster label and provider: one notification per alert and provider, so the targets
  // of a provider still down after a partial recovery come as one notification, not one page
  // each; a label an alert lacks (provider on ExporterDown) groups as empty.
  alertmanagerRoute:: {
    matchers: ['alertname=~"ProviderHealth.+"'],
    group_by: ['alertname', c.clusterLabel, 'provider'],
    group_wait: c.alertmanagerGroupWait,
    group_interval: c.alertmanagerGroupInterval,
    repeat_interval: c.alertmanagerRepeatInterval,
  },

  local matcherString(m) = '%s%s%s' % [m.name, m.matchType, std.escapeStringJson(m.value)],

  alertmanagerInhibitRules:: {
    inhibit_rules: [
      {
        source_matchers: [matcherString(m) for m in r.source],
        target_matchers: [matcherString(m) for m in r.target],
        equal: r.equal,
      }
      for r in $.inhibitRules
    ],
  },

  alertmanagerConfigInhibitRules:: [
    { sourceMatch: r.source, targetMatch: r.target, equal: r.equal }
    for r in $.inhibitRules
  ],
}
