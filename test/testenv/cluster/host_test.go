package cluster

import (
	"slices"
	"testing"
)

// TestSplitRule: a rule as iptables-save prints it becomes the arguments that delete it, a
// quoted comment (kube-proxy's name every rule) kept whole.
func TestSplitRule(t *testing.T) {
	for _, tc := range []struct {
		rule string
		want []string
	}{
		{`INPUT -j KUBE-FIREWALL`, []string{"INPUT", "-j", "KUBE-FIREWALL"}},
		{`POSTROUTING -s 10.244.0.5/32 -m comment --comment "name: \"phe-cluster\" id: \"abc\"" -j CNI-1f2e`,
			[]string{"POSTROUTING", "-s", "10.244.0.5/32", "-m", "comment", "--comment", `name: "phe-cluster" id: "abc"`, "-j", "CNI-1f2e"}},
		{`KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y`,
			[]string{"KUBE-SERVICES", "-d", "10.96.0.1/32", "-p", "tcp", "-m", "comment", "--comment", "default/kubernetes:https cluster IP", "-m", "tcp", "--dport", "443", "-j", "KUBE-SVC-NPX46M4PTMTKRN6Y"}},
	} {
		if got := splitRule(tc.rule); !slices.Equal(got, tc.want) {
			t.Errorf("splitRule(%s)\n got %q\nwant %q", tc.rule, got, tc.want)
		}
	}
}
