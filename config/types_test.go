package config_test

import (
	"slices"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

// TestProviderKeys: a provider's own keys are name, type, the thresholds and labels; its block's key is
// its type, one of the registered ones.
func TestProviderKeys(t *testing.T) {
	if want, got := []string{"name", "type", "failureThreshold", "successThreshold", "labels"}, config.YAMLKeys[config.Provider](); !slices.Equal(got, want) {
		t.Errorf("Provider's keys %q, want %q", got, want)
	}
	var want []string
	for _, typ := range checks.Registered() {
		want = append(want, string(typ.Name))
	}
	if got := config.TypeNames(); len(got) == 0 || !slices.Equal(got, want) {
		t.Errorf("the loader's types %q, want the registered ones %q", got, want)
	}
}
