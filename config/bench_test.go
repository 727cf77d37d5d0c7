package config_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// largeFile is a providers file of providers kvm providers with hosts hosts each.
func largeFile(providers, hosts int) []byte {
	var b strings.Builder
	b.WriteString("providers:\n")
	for p := range providers {
		fmt.Fprintf(&b, "  - name: kvm-%d\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: /k\n"+
			"      knownHostsFile: /kh\n      storagePool: default\n      hosts:\n", p)
		for h := range hosts {
			fmt.Fprintf(&b, "        - address: 198.18.%d.%d:22\n          name: hv-%d-%d\n", h/250, h%250+1, p, h)
		}
	}
	return []byte(b.String())
}

// TestLargeFile: a file of 10,000 targets, the size the exporter is benchmarked at, loads; the
// bound on alias expansion must not refuse a large file that has no aliases.
func TestLargeFile(t *testing.T) {
	cfg, err := config.Parse("large.yml", largeFile(10, 1000))
	if err != nil {
		t.Fatal(firstLine(err))
	}
	n := 0
	for _, p := range cfg.Providers {
		n += len(p.Block.(*kvm.Config).Hosts)
	}
	if n != 10_000 {
		t.Errorf("%d hosts, want 10000", n)
	}
}

func BenchmarkParse(b *testing.B) {
	example, err := os.ReadFile(example)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"example", example},
		{"10000-hosts", largeFile(10, 1000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				if _, err := config.Parse("providers.yml", bc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
