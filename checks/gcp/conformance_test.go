package gcp_test

import (
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
)

// TestConformance runs the provider types' conformance kit against the GCE wire server, through
// the real OAuth flow; the hung provider's endpoint is each of the kit's hung endpoints (its
// token exchange still goes to the wire server).
func TestConformance(t *testing.T) {
	s := gcefake.Start(t)
	s.AddInstances(project, "us-east1-b", 1, managed)
	key := s.ServiceAccountKey(t)
	block := "project: " + project + "\ncredentialsFile: " + key + "\nendpoint: " + s.URL()
	checkertest.Run(t, checkertest.Harness{
		Type:    gcp.Type,
		Block:   block,
		Changed: block + "\nfilter: \"\"",
		Targets: []string{project},
		Hung: func(addr string) string {
			return "project: " + project + "\ncredentialsFile: " + key + "\nendpoint: http://" + addr
		},
		Secrets: func() []string { return append(privateKeyLines(t, key), s.IssuedTokens()...) },
	})
}
