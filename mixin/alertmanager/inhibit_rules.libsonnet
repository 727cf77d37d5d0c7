// Alertmanager inhibit rules: while a provider is down as a whole (ProviderHealthProviderDown),
// the TargetDown alerts of its targets are muted, so an outage pages once. The rules match on
// the labels the alerts really carry: provider, and the cluster label with showMultiCluster,
// so one provider's (or one cluster's) outage never mutes another's targets.
//
// inhibitRules is the one list; alertmanagerInhibitRules renders it for alertmanager.yml
// (alertmanager/inhibit_rules.yaml), alertmanagerConfigInhibitRules for a Prometheus Operator
// AlertmanagerConfig (monitoring.coreos.com/v1alpha1, deploy/alertmanagerconfig.yaml).
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local matcher(name, value) = { name: name, matchType: '=', value: value },

  inhibitRules+:: [
    {
      source: [matcher('alertname', 'ProviderHealthProviderDown')],
      target: [matcher('alertname', 'ProviderHealthTargetDown')],
      equal: promql.groupLabels(c, ['provider']),
    },
  ],

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
