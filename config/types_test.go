package config_test

import (
	"slices"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// TestProviderKeys: a provider's own keys are name, type, the thresholds and labels; its block's key is
// its type, one of the registered ones.
func TestProviderKeys(t *testing.T) {
	if want, got := []string{"name", "type", "failureThreshold", "successThreshold", "labels"}, config.YAMLKeys[config.Provider](); !slices.Equal(got, want) {
		t.Errorf("Provider's keys %q, want %q", got, want)
	}
	if got := config.TypeNames(); !slices.Equal(got, []string{"gcp", "kubernetes", "kvm", "vsphere"}) {
		t.Errorf("registered types %q, want the ones this module ships", got)
	}
}
