// The few Grafana dashboard helpers this mixin needs (grafonnet is not available here): a
// dashboard, template variables, Prometheus targets, four panel types and a grid layout. Every
// panel queries the datasource picked in the ${datasource} variable.
{
  local datasource = { type: 'prometheus', uid: '${datasource}' },

  // A dashboard holding panels (laid out with grid below) and template variables.
  dashboard(title, uid, tags=[], refresh='1m', timezone='utc', period='6h', description=''):: {
    title: title,
    uid: uid,
    tags: tags,
    description: description,
    editable: true,
    graphTooltip: 1,  // shared crosshair
    refresh: refresh,
    timezone: timezone,
    time: { from: 'now-' + period, to: 'now' },
    schemaVersion: 39,
    version: 1,
    links: [],
    annotations: { list: [] },
    templating: { list: [] },
    panels: [],

    addVariables(vars):: self + { templating+: { list+: vars } },
    addPanels(panels):: self + { panels+: panels },
  },

  // The datasource picker: every panel and variable queries ${datasource}.
  datasourceVariable(label='Data source'):: {
    name: 'datasource',
    label: label,
    type: 'datasource',
    query: 'prometheus',
    current: { selected: false, text: 'default', value: 'default' },
    hide: 0,
    refresh: 1,
    regex: '',
    options: [],
  },

  // A variable whose values a label_values() query lists; hide: 0 shown, 2 hidden. allValue
  // is the regex "All" stands for; null: the values listed, so All stays within the query.
  // current: the value selected when the dashboard opens; null: All (or nothing without All).
  queryVariable(name, label, query, multi=true, includeAll=true, hide=0, allValue='.+', current=null):: {
    name: name,
    label: label,
    type: 'query',
    datasource: datasource,
    query: { query: query, refId: name },
    definition: query,
    current:
      if current != null then { selected: true, text: if multi then [current] else current, value: if multi then [current] else current }
      else if includeAll then { selected: true, text: 'All', value: '$__all' }
      else { selected: false, text: '', value: '' },
    hide: hide,
    multi: multi,
    includeAll: includeAll,
    [if allValue != null then 'allValue']: allValue,
    refresh: 2,  // on time range change
    regex: '',
    sort: 1,
    options: [],
  },

  // A Prometheus query. instant: one value per series (tables); format 'table' for tables.
  target(expr, legend='', refId='A', instant=false, format='time_series'):: {
    datasource: datasource,
    expr: expr,
    legendFormat: legend,
    refId: refId,
    instant: instant,
    range: !instant,
    format: format,
  },

  // What every panel has; `targets` get refIds A, B, ... in order.
  local panel(type, title, description, targets, unit) = {
    type: type,
    title: title,
    description: description,
    datasource: datasource,
    targets: [
      targets[i] { refId: std.char(std.codepoint('A') + i) }
      for i in std.range(0, std.length(targets) - 1)
    ],
    fieldConfig: {
      defaults: { unit: unit },
      overrides: [],
    },
    options: {},
  },

  local legend = { showLegend: true, displayMode: 'table', placement: 'bottom', calcs: ['lastNotNull', 'max'] },
  local tooltip = { mode: 'multi', sort: 'desc' },

  // A time series graph.
  timeseries(title, description, targets, unit='short', min=null, max=null, stack=false):: panel('timeseries', title, description, targets, unit) {
    fieldConfig+: {
      defaults+: {
        [if min != null then 'min']: min,
        [if max != null then 'max']: max,
        custom: {
          drawStyle: 'line',
          lineWidth: 1,
          fillOpacity: if stack then 30 else 10,
          showPoints: 'never',
          spanNulls: false,
          stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
        },
      },
    },
    options: { legend: legend, tooltip: tooltip },
  },

  // Value mappings for a 0/1 up gauge: Down (red) and Up (green).
  upMappings:: [{
    type: 'value',
    options: {
      '0': { text: 'Down', color: 'red', index: 0 },
      '1': { text: 'Up', color: 'green', index: 1 },
    },
  }],

  // A state timeline of 0/1 series (up over time).
  stateTimeline(title, description, targets):: panel('state-timeline', title, description, targets, 'short') {
    fieldConfig+: {
      defaults+: {
        mappings: $.upMappings,
        color: { mode: 'thresholds' },
        thresholds: { mode: 'absolute', steps: [{ color: 'red', value: null }, { color: 'green', value: 1 }] },
        custom: { fillOpacity: 80, lineWidth: 0 },
      },
    },
    options: {
      legend: { showLegend: false, displayMode: 'list', placement: 'bottom', calcs: [] },
      tooltip: { mode: 'single', sort: 'none' },
      showValue: 'never',
      mergeValues: true,
      alignValue: 'left',
      rowHeight: 0.9,
    },
  },

  // A table of instant queries merged on their common labels. columns lists the fields to
  // show, in order, as [field, header] pairs (a field is a label or 'Value #A' for query A's
  // value); other fields are hidden. overrides: per column header.
  table(title, description, targets, columns, overrides=[], sortBy=[]):: panel('table', title, description, [t { instant: true, range: false, format: 'table' } for t in targets], 'short') {
    fieldConfig+: { overrides: overrides },
    options: {
      showHeader: true,
      cellHeight: 'sm',
      frameIndex: 0,
      footer: { show: false, reducer: ['sum'], countRows: false, fields: '' },
      sortBy: sortBy,
    },
    transformations: [
      { id: 'merge', options: {} },
      { id: 'filterFieldsByName', options: { include: { names: [c[0] for c in columns] } } },
      {
        id: 'organize',
        options: {
          excludeByName: {},
          indexByName: { [columns[i][0]]: i for i in std.range(0, std.length(columns) - 1) },
          renameByName: { [c[0]]: c[1] for c in columns },
        },
      },
    ],
  },

  // A collapsible row header.
  row(title):: { type: 'row', title: title, collapsed: false, panels: [] },

  // Lays panels out left to right on Grafana's 24-column grid: a row takes a full line, other
  // panels take `width` columns (their own `w` when set) and `height` lines. ids from 1.
  grid(panels, width=12, height=8)::
    local place(acc, p) =
      local w = if p.type == 'row' then 24 else std.get(p, 'w', width);
      local h = if p.type == 'row' then 1 else std.get(p, 'h', height);
      local wrap = acc.x + w > 24 || p.type == 'row';
      local x = if wrap then 0 else acc.x;
      local y = if wrap then acc.y + acc.lineHeight else acc.y;
      local lineHeight = if wrap then h else std.max(acc.lineHeight, h);
      {
        x: if p.type == 'row' then 0 else x + w,
        y: if p.type == 'row' then y + 1 else y,
        lineHeight: if p.type == 'row' then 0 else lineHeight,
        panels: acc.panels + [
          std.mergePatch(p, { w: null, h: null }) {
            id: std.length(acc.panels) + 1,
            gridPos: { x: x, y: y, w: w, h: h },
          },
        ],
      };
    std.foldl(place, panels, { x: 0, y: 0, lineHeight: 0, panels: [] }).panels,
}
