package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// FuzzParse feeds the parser arbitrary bytes, seeded with every file of testdata/*.yml and the example. Whatever
// the input, config.Parse must return either a config that keeps the loader's promises or config.Errors whose
// every line is a placed problem; it must never panic.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(testdata, "*.yml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed files in %s: %v", testdata, err)
	}
	files = append(files, example)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("/etc/phe/providers.yml", data)
		if err != nil {
			if cfg != nil {
				t.Fatal("a config returned along with an error")
			}
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
			}
			for _, e := range es {
				if e.File != "/etc/phe/providers.yml" || e.Msg == "" || e.Line < 0 || e.Column < 0 {
					t.Fatalf("malformed problem: %#v", e)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(es) {
				t.Fatalf("%d problems printed on %d lines", len(es), n)
			}
			return
		}
		if cfg == nil {
			t.Fatal("neither a config nor an error")
		}
		checkInvariants(t, cfg)
	})
}

// checkInvariants asserts what every loaded config guarantees to its users.
func checkInvariants(t *testing.T, cfg *config.Config) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range cfg.Providers {
		if config.DNSLabelProblem("name", p.Name) != "" || seen[p.Name] {
			t.Fatalf("bad or duplicate name %q", p.Name)
		}
		seen[p.Name] = true
		switch p.Type {
		case "kubernetes":
			k, _ := p.Block.(*kubernetes.Config)
			if k == nil || k.Version == "" || k.Resource == "" {
				t.Fatalf("%s: kubernetes defaults missing: %+v", p.Name, k)
			}
			if k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig) {
				t.Fatalf("%s: relative kubeconfig %q", p.Name, k.Kubeconfig)
			}
		case "gcp":
			if g, _ := p.Block.(*gcp.Config); g == nil || len(g.Project) < 6 || len(g.Project) > 30 {
				t.Fatalf("%s: bad gcp block %+v", p.Name, p.Block)
			}
		case "kvm":
			k, _ := p.Block.(*kvm.Config)
			if k == nil || k.User == "" || !filepath.IsAbs(k.PrivateKeyFile) || k.StoragePool == "" ||
				k.Port < 1 || k.Port > 65535 || k.Concurrency < 1 || k.Concurrency > kvm.MaxConcurrency ||
				!strings.HasPrefix(k.Socket, "/") || len(k.Hosts) == 0 ||
				(k.KnownHostsFile == "" && !k.InsecureSkipHostKeyVerification) {
				t.Fatalf("%s: bad kvm block %+v", p.Name, k)
			}
			names, addrs := map[string]bool{}, map[string]bool{}
			for _, h := range k.Hosts {
				dial := h.DialAddress(k.Port)
				if h.Name == "" || names[h.Name] || addrs[strings.ToLower(dial)] || dial == h.Address && !strings.Contains(dial, ":") {
					t.Fatalf("%s: bad host %+v (dial %q)", p.Name, h, dial)
				}
				names[h.Name], addrs[strings.ToLower(dial)] = true, true
			}
		default:
			t.Fatalf("%s: unknown type %q", p.Name, p.Type)
		}
		if !p.Equal(clone(p)) {
			t.Fatalf("%s: not Equal to its copy", p.Name)
		}
	}
}
