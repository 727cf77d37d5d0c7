// What the availability rules, the error-budget alerts and the dashboard share: the recorded
// names, which windows are read from samples and which from buckets, and the objective of each
// provider as PromQL.
local promql = import 'promql.libsonnet';

{
  // The recorded series, by level (provider_target, provider) and what they hold.
  name(level, what):: level + ':proxy_operator_provider_target_up:' + what,

  // Every window some rule needs per provider: the dashboard's, the burn-rate pairs' and the
  // budget's, each once, shortest first.
  providerWindows(c)::
    local burn = std.flattenArrays([
      std.flattenArrays([[p.long, p.short] for p in c.availabilityBurnRates[k].windows])
      for k in std.objectFields(c.availabilityBurnRates)
    ]);
    std.set(c.availabilityWindows + burn + [c.availabilityBudgetWindow], promql.seconds),

  // Whether a window sums the per-bucket counts (true) or reads the samples (false); asserts
  // that it is a whole number of buckets or of samples.
  bucketed(c, w)::
    local s = promql.seconds(w);
    if s >= promql.seconds(c.availabilityBucketedFrom) then
      assert s % promql.seconds(c.availabilityBucket) == 0 : 'availability window %s is not a multiple of availabilityBucket %s' % [w, c.availabilityBucket];
      true
    else
      assert s % promql.seconds(c.availabilityInterval) == 0 : 'availability window %s is not a multiple of availabilityInterval %s' % [w, c.availabilityInterval];
      false,

  // The samples a window holds when nothing is missing.
  samples(c, w):: promql.seconds(w) / promql.seconds(c.availabilityInterval),

  // The objective of each provider, as an expression with the labels of expr(extra), a function
  // of extra label matchers returning an expression (e.g. a selector): the providers named in
  // availabilityObjectives get their own, every other one availabilityObjective.
  objective(c, expr)::
    assert c.availabilityObjective > 0 && c.availabilityObjective < 1 : 'availabilityObjective must be between 0 and 1';
    local overrides = [
      assert c.availabilityObjectives[p] > 0 && c.availabilityObjectives[p] < 1 : 'availabilityObjectives[%s] must be between 0 and 1' % p;
      '(0 * %s + %s)' % [expr(['provider="%s"' % p]), std.toString(c.availabilityObjectives[p])]
      for p in std.objectFields(c.availabilityObjectives)
    ];
    if overrides == [] then std.toString(c.availabilityObjective)
    else '(' + std.join(' or ', overrides + ['(0 * %s + %s)' % [expr([]), std.toString(c.availabilityObjective)]]) + ')',

  // The error budget left over the budget window, 1 - (1 - availability) / (1 - objective): 1
  // untouched, 0 spent, negative overspent. expr as in objective.
  budgetLeft(c, expr):: '1 - (1 - %s) / (1 - %s)' % [expr([]), self.objective(c, expr)],
}
