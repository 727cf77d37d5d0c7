package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionReady is the type of the one condition a ProviderHealth carries.
const ConditionReady = "Ready"

// Reasons of the Ready condition that are not a target's own reason. When some targets are down
// and all of them share one reason, the condition's reason is that target reason (for example
// TCPUnreachable), so kubectl's REASON column names the cause directly.
const (
	// ReasonAllTargetsReady: every target is up (status True).
	ReasonAllTargetsReady = "AllTargetsReady"
	// ReasonMultipleReasons: targets are down for different reasons (status False); the message
	// lists them.
	ReasonMultipleReasons = "MultipleReasons"
	// ReasonAwaitingFirstCheck: the provider has not been checked yet (status Unknown).
	ReasonAwaitingFirstCheck = "AwaitingFirstCheck"
	// ReasonChecksStale: no check of the provider completed within the staleness limit
	// (status Unknown); the targets keep their last verdicts.
	ReasonChecksStale = "ChecksStale"
)

// Bounds of the status, mirrored by the validation markers below (a test checks they agree).
const (
	// MaxTargets is the most entries status.targets holds. Past it, the writer keeps every
	// down target first, then up targets in the checker's order, and counts the rest in
	// status.omittedTargets; the counts always cover every target.
	MaxTargets = 256
	// MaxTargetMessageLength bounds status.targets[].message (in bytes); longer messages are
	// cut at a UTF-8 boundary and end with "...".
	MaxTargetMessageLength = 1024
	// MaxTargetNameLength bounds status.targets[].name (in bytes, as the API server counts
	// it); the providers file refuses longer target names (config.MaxTargetNameLength, which
	// a test holds equal to it).
	MaxTargetNameLength = 253
)

// ProviderHealth is the health of one provider the exporter checks: a Kubernetes API, a GCE
// project or a fleet of KVM hosts. Its name is the provider's name in the providers file. It has
// no spec: the exporter is its only writer and writes only its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ph,categories=monitoring
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether every target is up (Unknown before the first check or when checks are stale)"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why not ready: the down targets' shared reason, or MultipleReasons"
// +kubebuilder:printcolumn:name="Targets",type=string,JSONPath=`.status.targetsReady`,description="Ready targets / all targets"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.status.type`,priority=1,description="The provider's type"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1,description="Which targets are down and why"
// +kubebuilder:printcolumn:name="Since",type=date,JSONPath=`.status.conditions[?(@.type=="Ready")].lastTransitionTime`,priority=1,description="When the Ready condition last changed status"
type ProviderHealth struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the provider's health as of the exporter's last check.
	// +optional
	Status ProviderHealthStatus `json:"status,omitempty"`
}

// ProviderHealthStatus is what the exporter last observed of one provider. It changes only when
// something an observer can see changes, plus a coarse heartbeat; there are no per-round fields.
type ProviderHealthStatus struct {
	// Conditions holds the Ready condition: True when every target is up, False when at least
	// one is down, Unknown before the first check or when checks are stale.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Type is the provider's type.
	// +optional
	// +kubebuilder:validation:Enum=gcp;kubernetes;kvm;vsphere
	Type string `json:"type,omitempty"`

	// ReadyTargets counts the targets that are up.
	// +kubebuilder:validation:Minimum=0
	ReadyTargets int32 `json:"readyTargets"`

	// TotalTargets counts every target checked, including any omitted from Targets.
	// +kubebuilder:validation:Minimum=0
	TotalTargets int32 `json:"totalTargets"`

	// TargetsReady is "ready/total", for kubectl's TARGETS column.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	TargetsReady string `json:"targetsReady,omitempty"`

	// Targets holds each target's verdict, at most 256 of them (down targets first when the
	// provider has more).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Targets []TargetStatus `json:"targets,omitempty"`

	// OmittedTargets counts the targets left out of Targets because of its limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OmittedTargets int32 `json:"omittedTargets,omitempty"`

	// LastHeartbeatTime is when the exporter last wrote this status. It is refreshed at most
	// once per heartbeat interval (default 5m) when nothing else changes, so an old value means
	// the exporter stopped writing.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// Writer names the exporter process that last wrote this status (its host and a random ID
	// drawn at its start). A writer that finds another process's name here after writing the
	// object itself knows that a second writer with its identity is running.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Writer string `json:"writer,omitempty"`
}

// TargetStatus is the last verdict on one target of the provider.
type TargetStatus struct {
	// Name is the target's name (a KVM host, the API endpoint, the project).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Up is true when the last check found the target ready.
	Up bool `json:"up"`

	// Reason is one CamelCase word from the exporter's reason catalogue: Ready when up.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Reason string `json:"reason"`

	// Message explains the verdict for humans.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// LastTransitionTime is when Up last flipped (or when the target was first seen). A change
	// of reason while the target stays down does not move it.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
}

// ProviderHealthList is a list of ProviderHealth objects.
//
// +kubebuilder:object:root=true
type ProviderHealthList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderHealth `json:"items"`
}
