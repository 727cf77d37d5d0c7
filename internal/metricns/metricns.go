// Package metricns holds the prefix of every metric the exporter exports. It is a leaf, so that
// the packages low in the layering (hostpool) name their metrics without importing checks.
package metricns

// Namespace prefixes every metric the exporter exports: the collector's, the writer's, the
// KVM connection pool's and each provider type's own.
const Namespace = "proxy_operator"
