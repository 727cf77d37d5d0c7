package config

import "fmt"

// The names a provider's ProviderHealth object carries, and the limits the CRD puts on them
// (deploy/crd/, from crdwriter/v1alpha1), so that the API server never refuses an object for a
// name the providers file accepted:
//   - metadata.name is the provider's name (crdwriter uses it as is), and its Events are named
//     after it with a suffix: a DNS-1123 label of at most 63 characters, checked with the name;
//   - status.targets[].name is each target's name: at most MaxTargetNameLength bytes.
//     A KVM host's name (or, without one, its address) comes from this file and is checked
//     here; a GCP target is the project ID (at most 30 characters); a Kubernetes target is the
//     API server's URL from the kubeconfig, read at check time, which the writer reports as
//     that provider's own rejected object if the API server refuses it.

// MaxTargetNameLength bounds a target's name, in bytes: the ProviderHealth CRD's
// status.targets[].name holds at most this many (crdwriter/v1alpha1 marks its schema with the
// same number, and a test there holds the two equal). config owns it, so that the bottom layer
// imports no Kubernetes package.
const MaxTargetNameLength = 253

// TargetNameProblem says what is wrong with a target name the object would carry, or "". A
// provider type whose target names come from the providers file gives it as a Check to the
// reader of each name (Fields.String, Strings, Addresses), which places the problem at the
// value: "providers[0].tcp.addresses[2]: target name of 300 bytes: ...".
func TargetNameProblem(name string) string {
	if len(name) > MaxTargetNameLength {
		return fmt.Sprintf("target name of %d bytes: the ProviderHealth object's status.targets[].name holds at most %d bytes (set a shorter name)",
			len(name), MaxTargetNameLength)
	}
	return ""
}
