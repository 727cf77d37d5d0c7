package config

import (
	"strings"
	"testing"
)

func TestDNSLabel(t *testing.T) {
	for s, ok := range map[string]bool{
		"a": true, "cluster-main": true, "123": true, "a1-b2": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false,
	} {
		if got := dnsLabel(s) == ""; got != ok {
			t.Errorf("dnsLabel(%q) valid=%v, want %v", s, got, ok)
		}
	}
}
