//go:build tools

// Package tools pins what the tools module provides beyond its tool directives: the
// Prometheus Operator's API types, from which controller-gen generates the CRDs that the
// deploy test installs into the test environment's API server (see deploy/README).
package tools

import (
	// The ServiceMonitor and PrometheusRule types (monitoring.coreos.com/v1): without a
	// reference here `go mod tidy` would drop the module.
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)
