package vsphere_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// parse loads a providers file whose one provider has the vsphere block given (indented as
// the block's fields).
func parse(t *testing.T, block string) (*config.Config, error) {
	t.Helper()
	file := "providers:\n  - name: vc\n    type: vsphere\n    vsphere:\n" + block
	return config.Parse("/etc/phe/providers.yml", []byte(file))
}

func TestDecode(t *testing.T) {
	cfg, err := parse(t, `      url: https://vcenter.example.com/sdk
      usernameFile: vsphere/username
      passwordFile: /etc/phe/vsphere/password
      caFile: vsphere/ca.pem
      insecureSkipTLSVerify: false
      datacenter: DC-Lab
`)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Providers[0]
	got, ok := p.Block.(*vsphere.Config)
	if !ok {
		t.Fatalf("block %T, want *vsphere.Config", p.Block)
	}
	want := vsphere.Config{URL: "https://vcenter.example.com/sdk", UsernameFile: "/etc/phe/vsphere/username",
		PasswordFile: "/etc/phe/vsphere/password", CAFile: "/etc/phe/vsphere/ca.pem", Datacenter: "DC-Lab"}
	if *got != want {
		t.Errorf("decoded %+v, want %+v (relative paths from the providers file's directory)", *got, want)
	}
	if !got.Equal(&want) {
		t.Error("Equal is false for the same block")
	}
	other := want
	other.Datacenter = "DC-Other"
	if got.Equal(&other) {
		t.Error("Equal is true for another datacenter")
	}
	files := got.Files()
	if !slices.Contains(files, config.File{Field: "passwordFile", Path: want.PasswordFile, Secret: true}) ||
		!slices.Contains(files, config.File{Field: "caFile", Path: want.CAFile}) || len(files) != 3 {
		t.Errorf("files %+v, want the username, password and CA files", files)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q for a verified block", w)
	}

	// The registered constructor builds the checker without contacting anything.
	typ, ok := checks.Lookup(vsphere.Type)
	if !ok {
		t.Fatal("vsphere is not registered")
	}
	c, err := typ.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Targets(); !slices.Equal(got, []string{"vcenter.example.com"}) {
		t.Errorf("targets %v", got)
	}
	if c.Type() != vsphere.Type || c.Name() != "vc" {
		t.Errorf("type %s, name %s", c.Type(), c.Name())
	}
}

func TestDecodeInsecureWarns(t *testing.T) {
	cfg, err := parse(t, "      url: https://10.0.0.5\n      usernameFile: /u\n      passwordFile: /p\n      insecureSkipTLSVerify: true\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], `"vc"`) || !strings.Contains(w[0], "insecureSkipTLSVerify") {
		t.Errorf("warnings %q, want one naming the provider and insecureSkipTLSVerify", w)
	}
}

// Bad blocks are refused with file:line:col, the field and what is allowed; a URL with a
// password is refused without repeating it.
func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		want        []string
	}{
		{"missing everything", "      datacenter: x\n", []string{
			"/etc/phe/providers.yml:4:5: providers[0].vsphere.url: missing required field (an absolute https URL such as https://vcenter.example.com/sdk)",
			"/etc/phe/providers.yml:4:5: providers[0].vsphere.usernameFile: missing required field (a file holding the username)",
			"/etc/phe/providers.yml:4:5: providers[0].vsphere.passwordFile: missing required field (a file holding the password)",
		}},
		{"http url", "      url: http://vcenter.example.com/sdk\n      usernameFile: /u\n      passwordFile: /p\n", []string{
			`/etc/phe/providers.yml:5:12: providers[0].vsphere.url: invalid URL: scheme "http": want an absolute https URL with a host, such as https://vcenter.example.com/sdk, without user, query or fragment`,
		}},
		{"url with a password", "      url: https://admin:hunter2@vcenter.example.com/sdk\n      usernameFile: /u\n      passwordFile: /p\n", []string{
			"providers[0].vsphere.url: invalid URL: the URL carries a user part",
		}},
		{"empty password file", "      url: https://vc\n      usernameFile: /u\n      passwordFile: \"\"\n", []string{
			"/etc/phe/providers.yml:7:21: providers[0].vsphere.passwordFile: must not be empty (a file holding the password)",
		}},
		{"unknown key", "      url: https://vc\n      usernameFile: /u\n      passwordFile: /p\n      password: hunter2\n", []string{
			"/etc/phe/providers.yml:8:7: providers[0].vsphere.password: unknown field (allowed: url, usernameFile, passwordFile, caFile, insecureSkipTLSVerify, datacenter)",
		}},
		{"quoted bool", "      url: https://vc\n      usernameFile: /u\n      passwordFile: /p\n      insecureSkipTLSVerify: \"true\"\n", []string{
			"providers[0].vsphere.insecureSkipTLSVerify",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.block)
			if err == nil {
				t.Fatalf("accepted: %+v", cfg.Providers[0].Block)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors\n%v\nlack\n%s", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("errors hold the password:\n%v", err)
			}
		})
	}
}

func TestDecodeRelativeCAFile(t *testing.T) {
	cfg, err := parse(t, "      url: https://vc:8443\n      usernameFile: u\n      passwordFile: p\n")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Providers[0].Block.(*vsphere.Config)
	if c.CAFile != "" || c.UsernameFile != filepath.Join("/etc/phe", "u") {
		t.Errorf("decoded %+v", *c)
	}
	files := c.Files()
	if !slices.Contains(files, config.File{Field: "caFile"}) {
		t.Errorf("files %+v: an unset caFile is listed with an empty path", files)
	}
}
