package kubernetes

import (
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

// TestConformance runs the provider types' conformance kit against a real kube-apiserver; the
// hung provider's kubeconfig names each of the kit's hung endpoints.
func TestConformance(t *testing.T) {
	env := kube.Start(t)
	const hungToken = "hung-server-token-0123456789"
	checkertest.Run(t, checkertest.Harness{
		Type:    Type,
		Block:   "kubeconfig: " + env.Kubeconfig,
		Changed: "kubeconfig: " + env.Kubeconfig + "\nnamespace: default",
		Targets: []string{kube.AdminUser + "@testenv"},
		Hung: func(addr string) string {
			return "kubeconfig: " + writeKubeconfig(t, "http://"+addr, nil, "hung", hungToken)
		},
		Secrets: func() []string { return []string{env.AdminConfig.BearerToken, hungToken} },
	})
}
