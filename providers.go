package main

// The provider types this build checks, in one place: each package registers its type
// (checks.Register) when it is imported. Adding a provider type is its package and one line
// here (docs/providers.md).
import (
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	_ "github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
)
