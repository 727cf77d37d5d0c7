package vsphere_test

import (
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
)

// TestConformance runs the provider types' conformance kit against the vCenter simulator; the
// hung provider's url is each of the kit's hung endpoints (TCP accepted and TLS never
// answered, or the connect never completed).
func TestConformance(t *testing.T) {
	sim := vcsim.Start(t, vcsim.Options{})
	files := "\nusernameFile: " + sim.UsernameFile() + "\npasswordFile: " + sim.PasswordFile() + "\ncaFile: " + sim.CAFile()
	block := "url: " + sim.URL() + files
	checkertest.Run(t, checkertest.Harness{
		Type:    vsphere.Type,
		Block:   block,
		Changed: block + "\ndatacenter: DC0",
		Targets: []string{sim.Host()},
		Hung:    func(addr string) string { return "url: https://" + addr + "/sdk" + files },
		Secrets: func() []string { return []string{sim.Password()} },
	})
}
