package kvm

import "testing"

// The address forms themselves are config.ParseAddress's (config/address_test.go); a host
// without a port is dialled on the provider's.
func TestDialAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, dial string
	}{
		{"198.18.0.1", "198.18.0.1:2222"},
		{"198.18.0.1:22", "198.18.0.1:22"},
		{"HV1.Lab", "HV1.Lab:2222"},
		{"[fd00::1]", "[fd00::1]:2222"},
		{"[fe80::1%eth0]:22", "[fe80::1%eth0]:22"},
		{"fd00::1", "fd00::1"}, // not an address: dialled as written, for the dialer's error
	} {
		if got := (Host{Address: tc.addr}).DialAddress(2222); got != tc.dial {
			t.Errorf("DialAddress(%q) = %q, want %q", tc.addr, got, tc.dial)
		}
	}
	k := &Config{Port: 2222}
	if p := k.TargetProblem("hv1:0"); p == "" {
		t.Error(`TargetProblem("hv1:0") accepts a port out of range`)
	}
	if p := k.TargetProblem("hv1"); p != "" {
		t.Errorf(`TargetProblem("hv1") = %q: a host without a port takes the provider's`, p)
	}
}
