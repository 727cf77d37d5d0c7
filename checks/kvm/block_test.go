package kvm

import (
	"strings"
	"testing"
)

func TestSplitAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, dial string // dial empty: invalid
	}{
		{"198.18.0.1", "198.18.0.1:22"},
		{"198.18.0.1:2222", "198.18.0.1:2222"},
		{"hv1", "hv1:22"},
		{"hv1.lab.example.com:22", "hv1.lab.example.com:22"},
		{"HV1.Lab", "HV1.Lab:22"},
		{"[fd00::1]:2222", "[fd00::1]:2222"},
		{"[fd00::1]", "[fd00::1]:22"},
		{"fd00::1", ""},
		{"fd00::1:22", ""},
		{"[fe80::1%eth0]:22", "[fe80::1%eth0]:22"},
		{"", ""},
		{":22", ""},
		{"hv1:", ""},
		{"hv1:0", ""},
		{"hv1:+22", ""},
		{"hv1:65536", ""},
		{"hv1:22:33", ""},
		{"[fd00::1", ""},
		{"[fd00::1]x", ""},
		{"[198.18.0.1]:22", ""},
		{"fd00::1::2", ""},
		{"-hv1", ""},
		{"hv1-", ""},
		{"hv..lab", ""},
		{"hv_1", ""},
		{"198.18.0.256", ""},
		{strings.Repeat("a", 64), ""},
		{strings.Repeat("a.", 127) + "aa", ""},
	} {
		_, _, _, problem := splitAddress(tc.addr)
		if (problem == "") != (tc.dial != "") {
			t.Errorf("splitAddress(%q): problem %q, want valid=%v", tc.addr, problem, tc.dial != "")
			continue
		}
		if tc.dial != "" {
			if got := (Host{Address: tc.addr}).DialAddress(22); got != tc.dial {
				t.Errorf("DialAddress(%q) = %q, want %q", tc.addr, got, tc.dial)
			}
		}
	}
}
