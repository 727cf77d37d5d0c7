// Package providers is the one list of the provider types this build checks. Each type's package
// registers its type (checks.Register) when it is imported; the exporter and every test that
// needs the build's types import this package, and take the list from the registry
// (checks.Registered, config.TypeNames).
//
// Adding a provider type is its package under checks/, one line here, and `make generate`
// (docs/providers.md).
package providers

import (
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
)
