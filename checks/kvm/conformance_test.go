package kvm

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
)

// TestConformance runs the provider types' conformance kit against two real hosts (sshd and
// libvirtd in network namespaces); the hung provider's one host is each of the kit's hung
// endpoints, with every bound of its own at a minute, so that only the deadline or Close ends
// its check.
func TestConformance(t *testing.T) {
	f := kvmhost.Start(t, 2)
	kc := f.KVMConfig()
	common := fmt.Sprintf("user: %s\nprivateKeyFile: %s\nknownHostsFile: %s\nsocket: %s\nstoragePool: %s\n",
		kc.User, kc.PrivateKeyFile, kc.KnownHostsFile, kc.Socket, kc.StoragePool)
	block := common + "hosts:\n"
	var targets []string
	for _, h := range kc.Hosts {
		block += fmt.Sprintf("  - {address: %q, name: %s}\n", h.Address, h.Name)
		targets = append(targets, h.Name)
	}
	checkertest.Run(t, checkertest.Harness{
		Type:    Type,
		Block:   block,
		Changed: block + "concurrency: 1\n",
		Targets: targets,
		Hung: func(addr string) string {
			return common + "tcpTimeout: 1m\nsshTimeout: 1m\nlibvirtTimeout: 1m\nrpcTimeout: 1m\n" +
				fmt.Sprintf("hosts:\n  - {address: %q, name: silent}\n", addr)
		},
		Secrets: func() []string { return keyLines(t, kc.PrivateKeyFile) },
	})
}

// keyLines are the base64 lines of a PEM private key file.
func keyLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "-----") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s holds no key", path)
	}
	return lines
}
