package config_test

import (
	"slices"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// TestTypesMatchChecks keeps the providers file's types and the checks' types one list.
func TestTypesMatchChecks(t *testing.T) {
	var want []string
	for _, ty := range checks.Types {
		want = append(want, string(ty))
	}
	if !slices.Equal(config.Types, want) {
		t.Errorf("config.Types = %q, checks.Types = %q", config.Types, want)
	}
}
