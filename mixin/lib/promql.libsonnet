// Small helpers that build PromQL fragments from _config, so that the multi-cluster switch
// changes every aggregation in one place.
{
  // The labels an aggregation keeps: the cluster label first when showMultiCluster is on.
  groupLabels(config, labels)::
    (if config.showMultiCluster then [config.clusterLabel] else []) + labels,

  // 'by (cluster, provider, target)' (or 'by (provider, target)'; 'by ()' for no labels).
  by(config, labels):: 'by (' + std.join(', ', self.groupLabels(config, labels)) + ')',

  // The labels that identify one exporter process, for joins with its own gauges.
  on(config):: 'on (' + std.join(', ', self.groupLabels(config, ['job', 'instance'])) + ')',

  // A series selector: metric{jobSelector, extra...}.
  sel(config, metric, extra=[]):: metric + '{' + std.join(', ', [config.jobSelector] + extra) + '}',

  // The number of seconds in a one-unit Prometheus duration ('90s', '30m', '24h', '7d').
  seconds(d)::
    local units = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
    local unit = d[std.length(d) - 1];
    assert std.objectHas(units, unit) : 'duration %s: want a number and one of s, m, h, d, w' % d;
    std.parseInt(d[0:std.length(d) - 1]) * units[unit],

  // The number of seconds in any Prometheus duration ('1h30m', '90s', '1500ms').
  durationSeconds(d)::
    local units = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
    local parse(i, num, total) =
      if i >= std.length(d) then
        assert num == '' && i > 0 : 'duration %s: want numbers, each followed by one of ms, s, m, h, d, w, y' % d;
        total
      else if std.member('0123456789', d[i]) then parse(i + 1, num + d[i], total)
      else
        local unit = if d[i] == 'm' && i + 1 < std.length(d) && d[i + 1] == 's' then 'ms' else d[i];
        assert num != '' && std.objectHas(units, unit) : 'duration %s: want numbers, each followed by one of ms, s, m, h, d, w, y' % d;
        parse(i + std.length(unit), '', total + std.parseInt(num) * units[unit]);
    parse(0, '', 0),
}
