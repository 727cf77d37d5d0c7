// Package mixin holds the tests of the provider-health-exporter monitoring mixin (the jsonnet
// sources beside this file): the generated files match their sources, the sources are
// formatted and lint clean, the alerts follow mixtool's lint rules and pass their promtool rule
// tests on Prometheus 3, and the dashboard decodes strictly into the Grafana foundation SDK's
// types with every query valid PromQL over metrics that exist. See docs/mixin.md.
package mixin
