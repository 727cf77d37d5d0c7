package checkertest

import (
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

func TestProvidersFileKeepsTheBlocksIndentation(t *testing.T) {
	r := &run{h: Harness{Type: "kvm"}}
	got := r.providersFile("\n\t\n    user: root\n    hosts:\n      - {address: a}\n\n")
	want := "providers:\n  - name: conformance\n    type: kvm\n    kvm:\n" +
		"      user: root\n      hosts:\n        - {address: a}\n"
	if got != want {
		t.Errorf("providersFile:\n%s\nwant:\n%s", got, want)
	}
	// The file is YAML the loader reads up to the type (not registered in this package).
	_, err := config.Parse("/p.yml", []byte(got))
	if err == nil || !strings.Contains(err.Error(), "kvm") {
		t.Errorf("config.Parse: %v, want the unknown type named", err)
	}
}

func TestGoroutinesSeesANewOne(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	go func() { <-stop }()
	defer close(stop)
	var fresh []string
	for id, stack := range goroutines() {
		if _, old := before[id]; !old {
			fresh = append(fresh, stack)
		}
	}
	if len(fresh) != 1 || !strings.Contains(fresh[0], "TestGoroutinesSeesANewOne") {
		t.Fatalf("new goroutines: %q, want the one started by the test", fresh)
	}
	own := false
	for _, stack := range before {
		own = own || strings.Contains(stack, "TestGoroutinesSeesANewOne")
	}
	if !own {
		t.Error("the test's own goroutine is not in the first count")
	}
	if serverSide(fresh[0]) {
		t.Error("a test goroutine taken for a server's")
	}
}
