package config_test

import (
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// A KVM target name longer than the CRD allows (its own name, or its address with a port when it
// has none: an address's host alone fits) is refused at its line and column, naming the limit; one at the limit is accepted.
func TestTargetNamesFitTheCRD(t *testing.T) {
	long := strings.Repeat("h", 300)
	atLimit := strings.Repeat("a", config.MaxTargetNameLength)
	file := `providers:
  - name: kvm-lab
    type: kvm
    kvm:
      user: root
      privateKeyFile: /dev/null
      insecureSkipHostKeyVerification: true
      storagePool: default
      hosts:
        - address: 198.18.0.1
          name: ` + long + `
        - address: 198.18.0.2
          name: ` + atLimit + `
        - address: ` + strings.Repeat(strings.Repeat("b", 62)+".", 4) + `e:2222
`
	_, err := config.Parse("providers.yml", []byte(file))
	if err == nil {
		t.Fatal("a 300-byte target name was accepted")
	}
	es, ok := err.(config.Errors)
	if !ok {
		t.Fatalf("err = %T %v, want config.Errors", err, err)
	}
	want := []string{
		"providers.yml:11:17: providers[0].kvm.hosts[0].name: target name of 300 bytes: the ProviderHealth object's status.targets[].name holds at most 253 bytes",
		"providers.yml:14:20: providers[0].kvm.hosts[2].address: target name of 258 bytes: the ProviderHealth object's status.targets[].name holds at most 253 bytes",
	}
	var got []string
	for _, e := range es {
		if strings.Contains(e.Msg, "target name of") {
			got = append(got, e.Error())
		}
	}
	if len(got) != len(want) {
		t.Fatalf("errors:\n%v\nwant the two target names:\n%s", err, strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}
