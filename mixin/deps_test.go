package mixin_test

import (
	_ "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	_ "github.com/prometheus/prometheus/promql/parser"
)
