package crdwriter

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The writer's errors, and which of them are about one object.

var (
	errCRDMissing = errors.New("the ProviderHealth CRD is not installed")
	errNotOurs    = errors.New("the object belongs to someone else")
	// errNotLeader: this term may not write (lease.go).
	errNotLeader = errors.New("not writing: this replica does not hold the lease, or its last renewal is older than the renew deadline")
	// errFenced is what the transport's fence answers a write outside a term.
	errFenced = errors.New("crdwriter: write refused before sending: " + errNotLeader.Error())
	// errRejected: the API server refused to create the provider's object (reported by reject).
	errRejected = errors.New("the API server rejected the object")
	// errStillConflicting: an object kept changing under the writer while it wrote it.
	errStillConflicting = errors.New("still conflicting after 5 attempts")
	// errEventNotLeader is what the sink answers when this replica lost the lease. It is an API
	// status error so that client-go's recorder drops the Event instead of retrying it.
	errEventNotLeader = apierrors.NewServiceUnavailable("not recording the Event: " + errNotLeader.Error())
)

// perObject reports whether err is about one object (the API server answered about it: refused
// by an admission policy, too large, failed on the server, or a conflict that persists), so that
// only that object backs off; any other error (the API server is unreachable, overloaded or
// refuses the writer's credentials, the CRD is missing, the lease is overdue) stops the sync.
func perObject(err error) bool {
	if errors.Is(err, errCRDMissing) || errors.Is(err, errNotLeader) {
		return false
	}
	if errors.Is(err, errStillConflicting) {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err),
		apierrors.IsServerTimeout(err), apierrors.IsUnauthorized(err):
		return false // about the API server or the writer's credentials, not this object
	}
	return true
}
