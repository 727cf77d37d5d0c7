// Package v1alpha1 holds the ProviderHealth API types (group providerhealth.io, version
// v1alpha1): one cluster-scoped object per configured provider, whose status mirrors the
// exporter's last verdicts. The CRD YAML (deploy/crd/) and zz_generated.deepcopy.go are generated
// from the kubebuilder markers here by controller-gen; edit the markers, never the output.
//
// +kubebuilder:object:generate=true
// +groupName=providerhealth.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the ProviderHealth resource.
const GroupName = "providerhealth.io"

// Resource is the resource's plural name, as the API server knows it.
const Resource = "providerhealths"

var (
	// SchemeGroupVersion is the group and version of these types.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}
	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ProviderHealth{}, &ProviderHealthList{}, &ProviderHealthPart{}, &ProviderHealthPartList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
