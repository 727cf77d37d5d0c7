package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PartResource is the plural name of ProviderHealthPart, as the API server knows it.
const PartResource = "providerhealthparts"

// MaxPartData bounds spec.data of a ProviderHealthPart (compressed bytes; the API's JSON
// carries them in base64, a third more): far below etcd's default request limit of 1.5 MiB, so
// that the object with its metadata always fits. A test holds the marker below equal to it.
const MaxPartData = 1 << 20

// ProviderHealthPart is one sharded replica's part (--shard.enabled): the verdicts it reports,
// with their consecutive counts, which the other replicas of its instance read through a
// watch. The leader of the ProviderHealth writer folds the parts into whole ProviderHealth
// objects; a replica that takes a target over goes on from the counts its previous owner
// published. The replica writes it only when a verdict changed (messages alone at most every
// few minutes), so at steady state it costs the control plane nothing. It lives in the
// namespace of the replicas' Leases, is named after the replica (its Lease's name) and, in a
// pod, is owned by the pod, so it goes with it. Nothing but the exporter writes it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=phpart,categories=monitoring
// +kubebuilder:printcolumn:name="Member",type=string,JSONPath=`.spec.member`,description="The replica whose verdicts these are"
// +kubebuilder:printcolumn:name="Verdicts",type=integer,JSONPath=`.spec.verdicts`,description="Verdicts in the part"
// +kubebuilder:printcolumn:name="Checked",type=date,JSONPath=`.spec.checkedAt`,description="When the round these verdicts come from ended"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProviderHealthPart struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the part as its replica last wrote it.
	Spec ProviderHealthPartSpec `json:"spec"`
}

// ProviderHealthPartSpec is a replica's verdicts, compressed.
type ProviderHealthPartSpec struct {
	// Member is the replica (the name of its shard Lease) whose verdicts these are.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Member string `json:"member"`

	// Sequence counts the replica's writes of this part since it started; its shard Lease
	// names the sequence its last finished round confirmed, so that a reader knows the part
	// it holds is current.
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence"`

	// CheckedAt is when the round these verdicts come from ended, on the replica's clock.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	CheckedAt metav1.Time `json:"checkedAt"`

	// Verdicts is the number of verdicts Data holds.
	// +kubebuilder:validation:Minimum=0
	Verdicts int32 `json:"verdicts"`

	// Data holds the verdicts: gzip-compressed JSON lines, a header line first (see the
	// exporter's docs/architecture.md). At most 1 MiB.
	// +kubebuilder:validation:MaxLength=1398104
	// +optional
	Data []byte `json:"data,omitempty"`
}

// ProviderHealthPartList is a list of ProviderHealthPart objects.
//
// +kubebuilder:object:root=true
type ProviderHealthPartList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderHealthPart `json:"items"`
}
