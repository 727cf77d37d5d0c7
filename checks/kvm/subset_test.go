package kvm

import (
	"context"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// CheckTargets (a sharded replica's check of the hosts it owns) checks the named hosts only,
// one verdict each, in the checker's order; a name the checker does not have is ignored.
func TestCheckTargets(t *testing.T) {
	p := config.Provider{Name: "lab", Type: "kvm", Block: &Config{
		User: "root", PrivateKeyFile: "/nonexistent", KnownHostsFile: "/nonexistent", StoragePool: "default",
		Hosts: []Host{{Address: "198.18.0.2", Name: "hv1"}, {Address: "198.18.0.3", Name: "hv2"}, {Address: "198.18.0.4", Name: "hv3"}},
	}}
	c := newChecker(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rs := c.CheckTargets(ctx, []string{"hv3", "hv1", "elsewhere"})
	if len(rs) != 2 || rs[0].Target != "hv1" || rs[1].Target != "hv3" {
		t.Fatalf("CheckTargets(hv3, hv1) = %+v, want verdicts on hv1 and hv3 only", rs)
	}
	for _, r := range rs {
		// No host is contacted: the unreadable key fails first, as a verdict.
		if r.Reason != ReasonKeyMaterialError {
			t.Errorf("%s: %s %q, want KeyMaterialError", r.Target, r.Reason, r.Message)
		}
	}
	if rs := c.CheckTargets(ctx, nil); len(rs) != 0 {
		t.Errorf("CheckTargets(none) = %+v, want no verdict", rs)
	}
}
