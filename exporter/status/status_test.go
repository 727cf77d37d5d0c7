package status

import (
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

func TestWorstReasonTies(t *testing.T) {
	// Two reasons with two targets each: the earlier dial stage (catalogue order) wins.
	r, n := WorstReason(kvm.Type, map[checks.Reason]int{kvm.ReasonPoolInactive: 2, kvm.ReasonSSHAuthFailed: 2, checks.ReasonTimeout: 1})
	if r != kvm.ReasonSSHAuthFailed || n != 2 {
		t.Errorf("worst %s ×%d, want SSHAuthFailed ×2", r, n)
	}
	r, n = WorstReason(gcp.Type, map[checks.Reason]int{checks.ReasonAPIError: 1, gcp.ReasonRateLimited: 3})
	if r != gcp.ReasonRateLimited || n != 3 {
		t.Errorf("worst %s ×%d, want RateLimited ×3", r, n)
	}
}
