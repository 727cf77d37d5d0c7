package config

import (
	"slices"
	"testing"
)

// TestBlockKeysAreTheTypes: a provider's block is named by its type, so the Provider fields
// after name and type are the provider types of package checks, in the same order.
func TestBlockKeysAreTheTypes(t *testing.T) {
	if got := providerFields[2:]; !slices.Equal(got, typeNames) {
		t.Errorf("Provider's block keys %q, provider types %q", got, typeNames)
	}
	if !slices.Equal(providerFields[:2], []string{"name", "type"}) {
		t.Errorf("Provider's first keys %q, want name and type", providerFields[:2])
	}
}
