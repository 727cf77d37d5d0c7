// Package incluster is what the exporter learns of the pod it runs in, for the packages that
// write to the cluster (the shard's Leases and parts, crdwriter's Lease and objects), so that
// both read it the same way.
package incluster

import (
	"strings"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// namespaceFile is where a pod's service account holds its namespace.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace is the namespace of the pod this runs in (its service account's), else
// "default" (Kubernetes' metav1.NamespaceDefault). The file is read as every file is (a regular
// file, bounded, with a deadline).
func PodNamespace() string {
	b, err := fileread.Read(namespaceFile, fileread.CredentialLimit)
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return "default"
}
