package crdwriter

import (
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Comparisons of statuses: what a reader of the object sees, and what the API server kept.

// sameVisible reports whether two statuses agree on everything that is worth a write of its
// own: everything but the heartbeat and the free-text messages. A change of message alone is
// written with the next heartbeat or change, so a checker whose messages vary every round (a
// duration, a port) cannot force a write per round.
func sameVisible(a, b *v1alpha1.ProviderHealthStatus) bool {
	return equality.Semantic.DeepEqual(withoutMessages(a), withoutMessages(b))
}

// sameUpDown reports whether two statuses differ at most in reasons and messages: no target
// flipped, none came or went, the counts and the Ready condition's status are the same.
func sameUpDown(a, b *v1alpha1.ProviderHealthStatus) bool {
	return equality.Semantic.DeepEqual(blanked(a, true), blanked(b, true))
}

// withoutMessages is normalized(st) without the messages.
func withoutMessages(st *v1alpha1.ProviderHealthStatus) v1alpha1.ProviderHealthStatus {
	return blanked(st, false)
}

// blanked is normalized(st) without messages, and without reasons too when reasons is set.
func blanked(st *v1alpha1.ProviderHealthStatus, reasons bool) v1alpha1.ProviderHealthStatus {
	c := normalized(st)
	c.Writer = "" // which process wrote it last is no change worth a write
	for i := range c.Targets {
		c.Targets[i].Message = ""
		if reasons {
			c.Targets[i].Reason = ""
		}
	}
	for i := range c.Conditions {
		c.Conditions[i].Message = ""
		if reasons {
			c.Conditions[i].Reason = ""
		}
	}
	return c
}

// normalized copies a status without its heartbeat and with times at the API's one-second
// precision, so a status read back from the API server compares equal to the one written.
func normalized(st *v1alpha1.ProviderHealthStatus) v1alpha1.ProviderHealthStatus {
	c := *st.DeepCopy()
	c.LastHeartbeatTime = nil
	for i := range c.Targets {
		c.Targets[i].LastTransitionTime = c.Targets[i].LastTransitionTime.Rfc3339Copy()
	}
	for i := range c.Conditions {
		c.Conditions[i].LastTransitionTime = c.Conditions[i].LastTransitionTime.Rfc3339Copy()
		c.Conditions[i].ObservedGeneration = 0
	}
	if len(c.Targets) == 0 {
		c.Targets = nil
	}
	if len(c.Conditions) == 0 {
		c.Conditions = nil
	}
	return c
}
