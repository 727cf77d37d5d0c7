package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// TestDefaultKVMConcurrency: a block without concurrency gets 32 up to 640 hosts and one slot
// per 20 hosts above (rounded up), at most the maximum; a block that sets it keeps its value.
func TestDefaultKVMConcurrency(t *testing.T) {
	for hosts, want := range map[int]int{1: 32, 100: 32, 640: 32, 641: 33, 1000: 50, 5000: 250, 100000: kvm.MaxConcurrency} {
		if got := kvm.DefaultConcurrencyFor(hosts); got != want {
			t.Errorf("kvm.DefaultConcurrencyFor(%d) = %d, want %d", hosts, got, want)
		}
	}
	file := func(hosts int, extra string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "providers:\n  - name: kvm\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: /k\n      knownHostsFile: /kh\n      storagePool: default\n%s      hosts:\n", extra)
		for i := range hosts {
			fmt.Fprintf(&b, "        - address: 10.%d.%d.%d\n", i>>16&255, i>>8&255, i&255)
		}
		return b.String()
	}
	for _, tc := range []struct {
		hosts int
		extra string
		want  int
	}{{10, "", 32}, {1000, "", 50}, {5000, "", 250}, {5000, "      concurrency: 16\n", 16}} {
		c, err := config.Parse("providers.yml", []byte(file(tc.hosts, tc.extra)))
		if err != nil {
			t.Fatalf("%d hosts: %v", tc.hosts, err)
		}
		if got := c.Providers[0].Block.(*kvm.Config).Concurrency; got != tc.want {
			t.Errorf("%d hosts%s: concurrency %d, want %d", tc.hosts, tc.extra, got, tc.want)
		}
	}
}
