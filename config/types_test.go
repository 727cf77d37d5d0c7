package config

import (
	"slices"
	"testing"
)

// TestBlockKeysAreTheTypes: a provider's block is named by its type, so the Provider fields
// after name, type and the thresholds are the provider types of package checks, in the same order.
func TestBlockKeysAreTheTypes(t *testing.T) {
	if got := providerFields[4:]; !slices.Equal(got, typeNames) {
		t.Errorf("Provider's block keys %q, provider types %q", got, typeNames)
	}
	if want := []string{"name", "type", "failureThreshold", "successThreshold"}; !slices.Equal(providerFields[:4], want) {
		t.Errorf("Provider's first keys %q, want %q", providerFields[:4], want)
	}
}
