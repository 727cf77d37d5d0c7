// The error-budget alerts: multi-window, multi-burn-rate alerts as the SRE workbook defines
// them (chapter "Alerting on SLOs"), on the availability rules (rules/rules.libsonnet). A
// provider's burn rate over a window is its error ratio there (1 - availability: down time over
// observed time, so a gap burns nothing) over the error budget (1 - objective). An alert fires
// when both windows of one of its pairs burn faster than the pair's factor: the long window
// says enough budget is gone, the short one that it is still going (so it resolves soon after
// the burn stops). ProviderHealthErrorBudgetFastBurn pages, ...SlowBurn opens a ticket.
//
// A provider down as a whole fires ProviderHealthProviderDown too (after providerDownFor); the
// burn alert, usually first, says what the outage costs the objective. Neither inhibits the
// other (docs/runbooks.md).
local availability = import '../lib/availability.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  prometheusAlerts+:: {
    local c = $._config,
    local by(labels) = promql.by(c, labels),
    local sel(what, extra=[]) = promql.sel(c, availability.name('provider', what), extra),
    local burn(w) = '(1 - %s) / (1 - %s)' % [sel('availability' + w), availability.objective(c, function(extra) sel('availability' + w, extra))],

    local pair(p) =
      'max %s (%s > %s and %s > %s)' % [by(['provider']), burn(p.long), std.toString(p.factor), burn(p.short), std.toString(p.factor)],

    local alert(name, speed, summary, what) = {
      local b = c.availabilityBurnRates[speed],
      alert: name,
      expr: std.join('\nor\n', [pair(p) for p in b.windows]),
      'for': b['for'],
      labels: { severity: b.severity },
      annotations: {
        summary: summary,
        description: 'Provider {{ $labels.provider }} is spending its availability error budget (over '
                     + c.availabilityBudgetWindow + ') {{ $value | humanize }} times as fast as its objective allows, over '
                     + std.join(' or ', ['%s (and %s) above %sx' % [p.long, p.short, std.toString(p.factor)] for p in b.windows])
                     + ': ' + what,
        runbook_url: c.runbookURLPattern % std.asciiLower(name),
      },
    },

    groups+: [
      {
        name: 'provider-health-exporter.error-budget',
        rules: [
          alert(
            'ProviderHealthErrorBudgetFastBurn',
            'fast',
            'A provider is spending its availability error budget fast.',
            'at this rate the budget is gone within days; some of its targets are down now.',
          ),
          alert(
            'ProviderHealthErrorBudgetSlowBurn',
            'slow',
            'A provider is spending its availability error budget too fast.',
            'at this rate the budget is gone before its window ends.',
          ),
        ],
      },
    ],
  },
}
