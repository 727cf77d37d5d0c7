package config_test

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

var update = flag.Bool("update", false, "rewrite the testdata/invalid-*.yml.err golden files")

// testdata holds the package's golden files (testdata/invalid-*.yml and the error text beside
// each, testdata/valid-*.yml).
const testdata = "testdata"

// example is the annotated example providers file of the README and docs/configuration.md.
const example = "../testdata/providers.yml"

// parseTestdata parses a file of testdata under its name from the package directory.
func parseTestdata(t *testing.T, name string) (*config.Config, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return config.Parse(filepath.Join("testdata", name), data)
}

// TestInvalidFiles checks every testdata/invalid-*.yml against the exact, complete error text in
// the golden file beside it (go test ./config -run TestInvalidFiles -update rewrites them).
func TestInvalidFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdata, "invalid-*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid files in %s: %v", testdata, err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			cfg, err := parseTestdata(t, name)
			if err == nil {
				t.Fatalf("parsed without error: %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("returned a config along with the error")
			}
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
			}
			for i := 1; i < len(es); i++ {
				if es[i].Line < es[i-1].Line || es[i].Line == es[i-1].Line && es[i].Column < es[i-1].Column {
					t.Errorf("errors not sorted by position: %v before %v", es[i-1], es[i])
				}
			}
			got := withTypesMarker(err.Error() + "\n")
			golden := file + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("no golden file (run with -update to write it): %v", err)
			}
			if got != string(want) {
				t.Errorf("errors differ from %s\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
	// A golden file without its input would silently test nothing.
	goldens, _ := filepath.Glob(filepath.Join(testdata, "invalid-*.yml.err"))
	for _, g := range goldens {
		if _, err := os.Stat(strings.TrimSuffix(g, ".err")); err != nil {
			t.Errorf("golden file %s has no input file", g)
		}
	}
}

// typesMarker stands, in the golden files, for the list of the build's provider types as the
// loader's messages write it ("gcp, kubernetes, ..."): adding a type changes no golden file.
const typesMarker = "<provider types>"

// withTypesMarker replaces the list of the build's provider types in msg with typesMarker.
func withTypesMarker(msg string) string {
	return strings.ReplaceAll(msg, strings.Join(config.TypeNames(), ", "), typesMarker)
}

// TestInvalidCategories pins, for each kind of problem the file format promises to report, one
// file that shows it and the message it must carry.
func TestInvalidCategories(t *testing.T) {
	for _, tc := range []struct {
		category, file, want string
	}{
		{"unknown field", "invalid-unknown-field.yml",
			"testdata/invalid-unknown-field.yml:9:7: providers[0].kvm.storage_pool: unknown field (allowed: user, privateKeyFile, passphraseFile, knownHostsFile, insecureSkipHostKeyVerification, port, socket, storagePool, concurrency, tcpTimeout, sshTimeout, libvirtTimeout, rpcTimeout, hosts, hostFiles)"},
		{"wrong type", "invalid-wrong-type.yml",
			`testdata/invalid-wrong-type.yml:9:13: providers[0].kvm.port: must be an integer, got string "22"`},
		{"duplicate name", "invalid-duplicate-name.yml",
			`testdata/invalid-duplicate-name.yml:9:11: providers[2].name: duplicate provider name "cluster-main" (first used by providers[0] at line 2)`},
		{"unknown type", "invalid-unknown-type.yml",
			`testdata/invalid-unknown-type.yml:3:11: providers[0].type: unknown provider type "vmware" (allowed: ` + strings.Join(config.TypeNames(), ", ") + `)`},
		{"missing required kubernetes", "invalid-missing-required-kubernetes.yml",
			"testdata/invalid-missing-required-kubernetes.yml:4:5: providers[0].kubernetes.resource: missing required field (required when group or version is set)"},
		{"missing required gcp", "invalid-missing-required-gcp.yml",
			"testdata/invalid-missing-required-gcp.yml:4:5: providers[0].gcp.project: missing required field"},
		{"missing required kvm", "invalid-missing-required-kvm.yml",
			"testdata/invalid-missing-required-kvm.yml:4:5: providers[0].kvm.privateKeyFile: missing required field"},
		{"bad DNS name", "invalid-dns-name.yml",
			`testdata/invalid-dns-name.yml:2:11: providers[0].name: invalid name "Cluster_Main": must be a DNS-1123 label: 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit`},
		{"wrong block for type", "invalid-wrong-block.yml",
			`testdata/invalid-wrong-block.yml:4:5: providers[0].kvm: block does not match type "gcp" (a gcp provider takes a gcp block)`},
		{"missing block", "invalid-wrong-block.yml",
			"testdata/invalid-wrong-block.yml:2:5: providers[0].gcp: missing required field (a gcp provider needs a gcp block)"},
		{"bad port", "invalid-host-address.yml",
			`testdata/invalid-host-address.yml:11:20: providers[0].kvm.hosts[1].address: invalid address "198.18.0.12:65536": port "65536" is not a number from 1 to 65535 (allowed: host, host:port or [v6]:port)`},
		{"bad host", "invalid-host-address.yml",
			`testdata/invalid-host-address.yml:15:20: providers[0].kvm.hosts[5].address: invalid address "hv_5.lab": not a valid host name or IP address (allowed: host, host:port or [v6]:port)`},
		{"kvm without known_hosts", "invalid-kvm-no-known-hosts.yml",
			"testdata/invalid-kvm-no-known-hosts.yml:4:5: providers[0].kvm.knownHostsFile: missing required field (required unless insecureSkipHostKeyVerification: true)"},
		{"duplicate YAML key", "invalid-duplicate-key.yml",
			"testdata/invalid-duplicate-key.yml:6:7: providers[0].gcp.project: duplicate key (first at line 5)"},
		{"multiple documents", "invalid-multiple-documents.yml",
			"testdata/invalid-multiple-documents.yml:5:1: a second YAML document starts here; the file is a single document"},
		{"not a mapping", "invalid-not-mapping.yml",
			"testdata/invalid-not-mapping.yml:1:1: the providers file must be a mapping with a providers key, got a list"},
		{"empty file", "invalid-empty.yml",
			"testdata/invalid-empty.yml: the file is empty: expected a mapping with a providers key (providers: [] for none)"},
	} {
		t.Run(tc.category, func(t *testing.T) {
			_, err := parseTestdata(t, tc.file)
			if err == nil {
				t.Fatal("parsed without error")
			}
			lines := strings.Split(err.Error(), "\n")
			if !slices.Contains(lines, tc.want) {
				t.Errorf("missing\n  %s\nin\n  %s", tc.want, strings.Join(lines, "\n  "))
			}
		})
	}
}

// TestSeveralErrorsAllReported: one file, one problem per provider and more, all reported.
func TestSeveralErrorsAllReported(t *testing.T) {
	_, err := parseTestdata(t, "invalid-many-errors.yml")
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("want config.Errors, got %T %v", err, err)
	}
	var fields []string
	for _, e := range es {
		fields = append(fields, e.Field)
	}
	want := []string{
		"providers[0].name",
		"providers[0].kubernetes.labelSelector",
		"providers[1].gcp.project",
		"providers[1].gcp.projet",
		"providers[2].name",
		"providers[2].type",
		"providers[3].kvm.knownHostsFile",
		"providers[3].kvm.port",
		"providers[3].kvm.hosts[0].address",
		"providers[3].kvm.hosts[1].extra",
	}
	if !slices.Equal(fields, want) {
		t.Errorf("fields with problems:\n got %q\nwant %q", fields, want)
	}
}

// TestExample loads the complete annotated example and checks every value, defaults included.
func TestExample(t *testing.T) {
	cfg, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(filepath.Dir(example))
	if err != nil {
		t.Fatal(err)
	}
	want := &config.Config{Providers: []config.Provider{
		{Name: "cluster-main", Type: "kubernetes", FailureThreshold: 1, SuccessThreshold: 1, Block: &kubernetes.Config{
			Kubeconfig: "/etc/phe/kubeconfig", Version: "v1", Resource: "pods",
			LabelSelector: kubernetes.DefaultLabelSelector,
		}},
		{Name: "cluster-edge", Type: "kubernetes", FailureThreshold: 1, SuccessThreshold: 1, Block: &kubernetes.Config{
			Kubeconfig: filepath.Join(dir, "secrets/edge.kubeconfig"), Context: "edge-admin",
			Group: "apps", Version: "v1", Resource: "deployments", Namespace: "ingress", LabelSelector: "",
		}},
		{Name: "gcp-prod", Type: "gcp", FailureThreshold: 1, SuccessThreshold: 1, Block: &gcp.Config{
			Project: "my-project-123456", CredentialsFile: "/etc/phe/gcp-key.json", Filter: gcp.DefaultFilter,
		}},
		{Name: "kvm-lab", Type: "kvm", FailureThreshold: 3, SuccessThreshold: 1, Block: &kvm.Config{
			User: "root", PrivateKeyFile: "/etc/phe/ssh/id_ed25519", KnownHostsFile: "/etc/phe/ssh/known_hosts",
			Port: kvm.DefaultPort, Socket: kvm.DefaultSocket, StoragePool: "default", Concurrency: kvm.DefaultConcurrency,
			TCPTimeout: kvm.DefaultTCPTimeout, SSHTimeout: kvm.DefaultSSHTimeout, LibvirtTimeout: kvm.DefaultLibvirtTimeout,
			RPCTimeout: kvm.DefaultRPCTimeout,
			Hosts: []kvm.Host{
				{Address: "198.18.0.11", Name: "hv1"},
				{Address: "198.18.0.12:2222", Name: "hv2"},
				{Address: "[::ffff:198.18.0.13]:22", Name: "[::ffff:198.18.0.13]:22"},
			},
		}},
	}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("example loaded as\n%s\nwant\n%s", dump(cfg), dump(want))
	}
	if ws := cfg.Warnings(); len(ws) != 0 {
		t.Errorf("example has warnings: %q", ws)
	}
	if got := names(cfg); !slices.Equal(got, []string{"cluster-main", "cluster-edge", "gcp-prod", "kvm-lab"}) {
		t.Errorf("names = %q", got)
	}
}

func dump(c *config.Config) string {
	var b strings.Builder
	for _, p := range c.Providers {
		fmt.Fprintf(&b, "%s %s %d/%d %+v\n", p.Name, p.Type, p.FailureThreshold, p.SuccessThreshold, p.Block)
	}
	return b.String()
}

// TestValidFiles loads every testdata/valid-*.yml and checks what each is there to show.
func TestValidFiles(t *testing.T) {
	checks := map[string]func(t *testing.T, c *config.Config){
		"valid-empty-providers.yml": func(t *testing.T, c *config.Config) {
			if len(c.Providers) != 0 || c.Providers == nil {
				t.Errorf("providers = %#v, want an empty list", c.Providers)
			}
			if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws[0], "no providers") {
				t.Errorf("warnings = %q, want one about no providers", ws)
			}
		},
		"valid-minimal.yml": func(t *testing.T, c *config.Config) {
			k := c.Providers[0].Block.(*kubernetes.Config)
			if k.Version != kubernetes.DefaultVersion || k.Resource != kubernetes.DefaultResource ||
				k.LabelSelector != kubernetes.DefaultLabelSelector || k.Kubeconfig != "" || k.Group != "" {
				t.Errorf("kubernetes defaults not applied: %+v", *k)
			}
			if g := c.Providers[1].Block.(*gcp.Config); g.Filter != "" {
				t.Errorf(`filter: "" must mean no filter, got %q`, g.Filter)
			}
			v := c.Providers[2].Block.(*kvm.Config)
			abs, _ := filepath.Abs(filepath.Join(testdata, "keys/id_ed25519"))
			if v.PrivateKeyFile != abs {
				t.Errorf("privateKeyFile = %q, want %q (relative to the file's directory)", v.PrivateKeyFile, abs)
			}
			if v.Port != kvm.DefaultPort || v.Socket != kvm.DefaultSocket || v.Concurrency != kvm.DefaultConcurrency ||
				v.KnownHostsFile != "" || !v.InsecureSkipHostKeyVerification {
				t.Errorf("kvm defaults not applied: %+v", *v)
			}
			if v.Hosts[0].Name != "198.18.0.11" {
				t.Errorf("host name = %q, want the address", v.Hosts[0].Name)
			}
			ws := c.Warnings()
			if len(ws) != 1 || !strings.Contains(ws[0], `provider "kvm-lab"`) || !strings.Contains(ws[0], "host key verification is off") {
				t.Errorf("warnings = %q, want one about kvm-lab's host keys", ws)
			}
		},
		"valid-anchors.yml": func(t *testing.T, c *config.Config) {
			a, b := c.Providers[0].Block.(*kvm.Config), c.Providers[1].Block.(*kvm.Config)
			if b.User != "root" || b.PrivateKeyFile != a.PrivateKeyFile || b.KnownHostsFile != a.KnownHostsFile {
				t.Errorf("merged fields not taken: %+v", *b)
			}
			if b.StoragePool != "images" || a.StoragePool != "default" {
				t.Errorf("explicit keys must win over merged ones: a=%q b=%q", a.StoragePool, b.StoragePool)
			}
			if len(b.Hosts) != 1 || b.Hosts[0].Name != "hv-b" {
				t.Errorf("hosts = %+v", b.Hosts)
			}
		},
	}
	files, _ := filepath.Glob(filepath.Join(testdata, "valid-*.yml"))
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			check, ok := checks[name]
			if !ok {
				t.Fatalf("no check for %s: add one saying what the file shows", name)
			}
			c, err := config.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			check(t, c)
		})
	}
	if len(files) != len(checks) {
		t.Errorf("%d valid files, %d checks", len(files), len(checks))
	}
}

// TestParseCases covers single behaviours on inline files.
func TestParseCases(t *testing.T) {
	const kvmBase = "providers:\n- name: k\n  type: kvm\n  kvm:\n    user: root\n    privateKeyFile: /k\n" +
		"    knownHostsFile: /kh\n    storagePool: default\n"
	for _, tc := range []struct {
		name, yaml string
		// wantErr is the complete error text; empty means the file must load and check must pass.
		wantErr string
		check   func(c *config.Config) string
	}{
		{name: "absent labelSelector takes the default",
			yaml: "providers:\n- name: a\n  type: kubernetes\n  kubernetes: {}\n",
			check: func(c *config.Config) string {
				return want(c.Providers[0].Block.(*kubernetes.Config).LabelSelector, kubernetes.DefaultLabelSelector)
			}},
		{name: "empty labelSelector means none",
			yaml: "providers:\n- name: a\n  type: kubernetes\n  kubernetes:\n    labelSelector: \"\"\n",
			check: func(c *config.Config) string {
				return want(c.Providers[0].Block.(*kubernetes.Config).LabelSelector, "")
			}},
		{name: "null labelSelector means none",
			yaml: "providers:\n- name: a\n  type: kubernetes\n  kubernetes:\n    labelSelector:\n",
			check: func(c *config.Config) string {
				return want(c.Providers[0].Block.(*kubernetes.Config).LabelSelector, "")
			}},
		{name: "null kubernetes block is an empty block",
			yaml:  "providers:\n- name: a\n  type: kubernetes\n  kubernetes:\n",
			check: func(c *config.Config) string { return want(c.Providers[0].Block.(*kubernetes.Config).Resource, "pods") }},
		{name: "absent gcp filter takes the default",
			yaml: "providers:\n- name: g\n  type: gcp\n  gcp: {project: abcdef}\n",
			check: func(c *config.Config) string {
				return want(c.Providers[0].Block.(*gcp.Config).Filter, gcp.DefaultFilter)
			}},
		{name: "gcp endpoint accepted",
			yaml: "providers:\n- name: g\n  type: gcp\n  gcp: {project: abcdef, endpoint: 'http://127.0.0.1:8080/'}\n",
			check: func(c *config.Config) string {
				return want(c.Providers[0].Block.(*gcp.Config).Endpoint, "http://127.0.0.1:8080/")
			}},
		{name: "null providers is an empty list",
			yaml: "providers:\n",
			check: func(c *config.Config) string {
				if len(c.Providers) != 0 {
					return "want no providers"
				}
				return ""
			}},
		{name: "port and concurrency set",
			yaml: kvmBase + "    port: 2022\n    concurrency: 1\n    hosts: [{address: h1}]\n",
			check: func(c *config.Config) string {
				k := c.Providers[0].Block.(*kvm.Config)
				if k.Port != 2022 || k.Concurrency != 1 {
					return "port/concurrency not taken"
				}
				return want(k.Hosts[0].DialAddress(k.Port), "h1:2022")
			}},
		{name: "labels of a provider and of its hosts",
			yaml: strings.Replace(kvmBase, "  type: kvm\n", "  type: kvm\n  labels: {site: ams1, owner: platform}\n", 1) +
				"    hosts: [{address: h1, labels: {rack: r12, owner: storage}}, {address: h2}]\n",
			check: func(c *config.Config) string {
				p := c.Providers[0]
				if len(p.Labels) != 2 || p.Labels["site"] != "ams1" || p.Labels["owner"] != "platform" {
					return fmt.Sprintf("provider labels %v", p.Labels)
				}
				got := p.Block.(config.TargetLabeler).TargetLabels()
				if len(got) != 1 || got["h1"]["rack"] != "r12" || got["h1"]["owner"] != "storage" {
					return fmt.Sprintf("host labels %v, want h1's only", got)
				}
				return ""
			}},
		{name: "same host on two ports is two targets",
			yaml: kvmBase + "    hosts: [{address: 198.18.0.1}, {address: '198.18.0.1:2222'}]\n",
			check: func(c *config.Config) string {
				return want(c.Providers[0].Block.(*kvm.Config).Hosts[1].Name, "198.18.0.1:2222")
			}},
		{name: "address equal to the default port form is a duplicate",
			yaml:    kvmBase + "    port: 2222\n    hosts: [{address: 198.18.0.1}, {address: '198.18.0.1:2222'}]\n",
			wantErr: `f.yml:10:46: providers[0].kvm.hosts[1].address: duplicate address "198.18.0.1:2222" (first used by hosts[0] at line 10)`},
		{name: "insecure with known hosts still loads",
			yaml: kvmBase + "    insecureSkipHostKeyVerification: true\n    hosts: [{address: h1}]\n",
			check: func(c *config.Config) string {
				ws := c.Warnings()
				if len(ws) != 1 || !strings.Contains(ws[0], "knownHostsFile is ignored") {
					return "want a warning that knownHostsFile is ignored, got " + strings.Join(ws, "|")
				}
				return ""
			}},
		{name: "a number is taken as written for a string field",
			yaml:  "providers:\n- name: '123'\n  type: gcp\n  gcp: {project: abcdef, filter: 1e3}\n",
			check: func(c *config.Config) string { return want(c.Providers[0].Block.(*gcp.Config).Filter, "1e3") }},
		{name: "bool for a string field",
			yaml:    "providers:\n- name: a\n  type: gcp\n  gcp: {project: true}\n",
			wantErr: "f.yml:4:18: providers[0].gcp.project: must be a string, got boolean true (quote it to mean the text)"},
		{name: "unknown root field",
			yaml:    "providers: []\nglobal: {}\n",
			wantErr: "f.yml:2:1: global: unknown field (allowed: providers)"},
		{name: "missing providers key",
			yaml:    "{}\n",
			wantErr: "f.yml:1:1: providers: missing required field (a list of providers; providers: [] for none)"},
		{name: "provider not a mapping",
			yaml:    "providers:\n- cluster-main\n",
			wantErr: `f.yml:2:3: providers[0]: must be a mapping, got string "cluster-main"`},
		{name: "non-string key",
			yaml:    "providers:\n- {name: a, type: kubernetes, kubernetes: {}, [x]: 1}\n",
			wantErr: "f.yml:2:47: providers[0]: a key must be a string, got a list"},
		{name: "hosts not a list",
			yaml:    kvmBase + "    hosts: 198.18.0.1\n",
			wantErr: `f.yml:9:12: providers[0].kvm.hosts: must be a list, got string "198.18.0.1"`},
		{name: "hosts null",
			yaml:    kvmBase + "    hosts:\n",
			wantErr: "f.yml:9:5: providers[0].kvm.hosts: must list at least one host (or set hostFiles)"},
		{name: "hostFiles instead of hosts",
			yaml: kvmBase + "    hostFiles: [inventory/*.json, /etc/kvm/hosts.yml]\n",
			check: func(c *config.Config) string {
				k := c.Providers[0].Block.(*kvm.Config)
				wd, _ := os.Getwd()
				want := []string{filepath.Join(wd, "inventory/*.json"), "/etc/kvm/hosts.yml"}
				if len(k.Hosts) != 0 || !slices.Equal(k.HostFiles, want) {
					return fmt.Sprintf("hosts %v, hostFiles %v; want none and %v", k.Hosts, k.HostFiles, want)
				}
				return ""
			}},
		{name: "hostFiles beside an empty hosts list",
			yaml: kvmBase + "    hosts: []\n    hostFiles: [/etc/kvm/*.yaml]\n",
			check: func(c *config.Config) string {
				if k := c.Providers[0].Block.(*kvm.Config); len(k.Hosts) != 0 || len(k.HostFiles) != 1 {
					return fmt.Sprintf("hosts %v, hostFiles %v", k.Hosts, k.HostFiles)
				}
				return ""
			}},
		{name: "hostFiles problems",
			yaml: kvmBase + "    hosts: [{address: h}]\n    hostFiles: [/etc/kvm/*, '', 3, [x], '/etc/[kvm.json']\n",
			wantErr: `f.yml:10:17: providers[0].kvm.hostFiles[0]: invalid pattern "/etc/kvm/*": must end in .json, .yml, .yaml (Prometheus's file_sd format, JSON or YAML by the ending)` + "\n" +
				"f.yml:10:29: providers[0].kvm.hostFiles[1]: must not be empty\n" +
				`f.yml:10:33: providers[0].kvm.hostFiles[2]: invalid pattern "3": must end in .json, .yml, .yaml (Prometheus's file_sd format, JSON or YAML by the ending)` + "\n" +
				"f.yml:10:36: providers[0].kvm.hostFiles[3]: must be a string, got a list\n" +
				`f.yml:10:41: providers[0].kvm.hostFiles[4]: invalid pattern "/etc/[kvm.json": syntax error in pattern (patterns follow Go's filepath.Match: *, ?, [a-z])`},
		{name: "hostFiles not a list",
			yaml:    kvmBase + "    hostFiles: /etc/kvm/hosts.yml\n",
			wantErr: `f.yml:9:16: providers[0].kvm.hostFiles: must be a list, got string "/etc/kvm/hosts.yml"`},
		{name: "custom tag",
			yaml:    "providers:\n- name: !secret a\n  type: kubernetes\n  kubernetes: {}\n",
			wantErr: `f.yml:2:9: providers[0].name: must be a string, got !secret "a"`},
		{name: "integer out of range",
			yaml:    kvmBase + "    port: 4294967296\n    hosts: [{address: h}]\n",
			wantErr: "f.yml:9:11: providers[0].kvm.port: integer 4294967296 is out of range"},
		{name: "hex port",
			yaml: kvmBase + "    port: 0x16\n    hosts: [{address: h}]\n",
			check: func(c *config.Config) string {
				if c.Providers[0].Block.(*kvm.Config).Port != 22 {
					return "0x16 must be 22"
				}
				return ""
			}},
		{name: "host name with control characters",
			yaml:    kvmBase + "    hosts: [{address: h, name: \"a\\tb\"}]\n",
			wantErr: `f.yml:9:32: providers[0].kvm.hosts[0].name: invalid name "a\tb": must not contain control characters`},
		{name: "merge of a scalar",
			yaml:    "providers:\n- name: a\n  type: kubernetes\n  kubernetes: {<<: 1}\n",
			wantErr: "f.yml:4:20: providers[0].kubernetes.<<: a merge key takes a mapping or a list of mappings, got integer 1"},
		{name: "self-merging anchor ends",
			yaml:    "providers:\n- &p {<<: *p, name: a, type: kubernetes}\n",
			wantErr: "f.yml:2:3: providers[0].kubernetes: missing required field (a kubernetes provider needs a kubernetes block)"},
		{name: "unknown anchor",
			yaml:    "providers: *nope\n",
			wantErr: "f.yml:1: invalid YAML: unknown anchor 'nope' referenced"},
		{name: "syntax error placed on its line, not the block's",
			yaml:    "providers:\n- name: a\n  type: gcp\n  gcp:\n    project: abcdef\n   filter: x\n",
			wantErr: "f.yml:6: invalid YAML: did not find expected key"},
		{name: "unclosed quote placed where it opens",
			yaml:    "providers:\n- name: a\n  type: 'gcp\n  gcp: {}\n",
			wantErr: "f.yml:3: invalid YAML: found unexpected end of stream"},
		{name: "syntax error in a second document",
			yaml:    "providers: []\n---\na: b: c\n",
			wantErr: "f.yml:3: invalid YAML: mapping values are not allowed in this context"},
		{name: "alias of a provider list",
			yaml: "providers:\n- &a {name: a, type: gcp, gcp: {project: abcdef}}\n- <<: *a\n  name: b\n",
			check: func(c *config.Config) string {
				return want(strings.Join(names(c), ","), "a,b") + want(c.Providers[1].Block.(*gcp.Config).Project, "abcdef")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("f.yml", []byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("parsed without error, want\n%s", tc.wantErr)
				}
				if err.Error() != tc.wantErr {
					t.Errorf("error\n got %s\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(c); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func want(got, want string) string {
	if got != want {
		return "got " + config.Quote(got) + ", want " + config.Quote(want)
	}
	return ""
}

// TestAliasExpansionBounded: a few lines that alias a large list over and over are refused
// instead of being walked for minutes.
func TestAliasExpansionBounded(t *testing.T) {
	_, err := config.Parse("f.yml", []byte("providers:\n- &x {name: a, type: gcp, gcp: {project: abcdef}}\n- *x\n"))
	if err == nil || !strings.Contains(err.Error(), "duplicate provider name") {
		t.Errorf("an aliased provider must be checked like any other: %v", err)
	}
	// hosts: 1,000 of them, aliased into 2,000 providers.
	var big strings.Builder
	big.WriteString("providers:\n- name: p0\n  type: kvm\n  kvm: &kvm\n    user: u\n    privateKeyFile: /k\n" +
		"    knownHostsFile: /kh\n    storagePool: p\n    hosts:\n")
	for i := range 1000 {
		fmt.Fprintf(&big, "    - address: h%d\n", i)
	}
	for i := 1; i < 2000; i++ {
		fmt.Fprintf(&big, "- {name: p%d, type: kvm, kvm: *kvm}\n", i)
	}
	_, err = config.Parse("f.yml", []byte(big.String()))
	want := "f.yml:1:1: the file expands to too many nodes through anchors and aliases"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("want %q, got %v", want, firstLine(err))
	}
}

func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestRelativePaths: every local path is taken from the providers file's directory, so config.Load
// returns absolute paths whatever the working directory.
func TestRelativePaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "conf", "providers.yml")
	if err := os.Mkdir(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	data := `providers:
- name: k
  type: kubernetes
  kubernetes: {kubeconfig: kube/config}
- name: g
  type: gcp
  gcp: {project: abcdef, credentialsFile: ../key.json}
- name: v
  type: kvm
  kvm:
    user: root
    privateKeyFile: ssh/id
    passphraseFile: ./ssh/pass
    knownHostsFile: /abs/known_hosts
    socket: /run/libvirt/libvirt-sock
    storagePool: default
    hosts: [{address: h}]
`
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Dir(file)
	for _, tc := range [][2]string{
		{c.Providers[0].Block.(*kubernetes.Config).Kubeconfig, filepath.Join(conf, "kube/config")},
		{c.Providers[1].Block.(*gcp.Config).CredentialsFile, filepath.Join(dir, "key.json")},
		{c.Providers[2].Block.(*kvm.Config).PrivateKeyFile, filepath.Join(conf, "ssh/id")},
		{c.Providers[2].Block.(*kvm.Config).PassphraseFile, filepath.Join(conf, "ssh/pass")},
		{c.Providers[2].Block.(*kvm.Config).KnownHostsFile, "/abs/known_hosts"},
		// The socket is a path on the remote host, never resolved locally.
		{c.Providers[2].Block.(*kvm.Config).Socket, "/run/libvirt/libvirt-sock"},
	} {
		if tc[0] != tc[1] {
			t.Errorf("path %q, want %q", tc[0], tc[1])
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "providers.yml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("want a not-exist error, got %v", err)
	}
	var es config.Errors
	if errors.As(err, &es) {
		t.Errorf("a read error must not be reported as validation problems")
	}
}

// TestEqual changes each field of a provider in turn (found by reflection, so a field added
// later is covered) and expects Equal to notice.
func TestEqual(t *testing.T) {
	c, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	reload, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range c.Providers {
		if !p.Equal(reload.Providers[i]) {
			t.Errorf("%s: not equal to itself loaded again", p.Name)
		}
		for j, q := range reload.Providers {
			if i != j && p.Equal(q) {
				t.Errorf("%s equal to %s", p.Name, q.Name)
			}
		}
	}
	for _, orig := range c.Providers {
		for _, mutate := range mutations(orig) {
			q := clone(orig)
			name := mutate.apply(&q)
			if orig.Equal(q) || q.Equal(orig) {
				t.Errorf("%s: changing %s not seen by Equal", orig.Name, name)
			}
			if !orig.Equal(clone(orig)) {
				t.Errorf("%s: a clone is not Equal", orig.Name)
			}
		}
	}
}

type mutation struct {
	apply func(p *config.Provider) string
}

// mutations returns one change per leaf field of p, the block's fields included.
func mutations(p config.Provider) []mutation {
	var ms []mutation
	pt := reflect.TypeFor[config.Provider]()
	for i := range pt.NumField() {
		f := pt.Field(i)
		if f.Name == "Block" || f.Name == "Labels" {
			continue // labels change no checker: TestEqualLeavesLabelsOut
		}
		ms = append(ms, mutation{func(q *config.Provider) string {
			change(reflect.ValueOf(q).Elem().Field(i))
			return "Provider." + f.Name
		}})
	}
	ms = append(ms, mutation{func(q *config.Provider) string {
		q.Block = nil
		return "Provider.Block (removed)"
	}})
	bt := reflect.TypeOf(p.Block).Elem()
	for j := range bt.NumField() {
		jf := bt.Field(j)
		ms = append(ms, mutation{func(q *config.Provider) string {
			change(reflect.ValueOf(q.Block).Elem().Field(j))
			return "Provider.Block." + jf.Name
		}})
	}
	return ms
}

func change(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		if v.Len() > 0 {
			e := v.Index(v.Len() - 1)
			e.Field(0).SetString(e.Field(0).String() + "x")
		} else {
			v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		}
	default:
		panic("change: unhandled kind " + v.Kind().String())
	}
}

// clone copies p and its block, slices included, so that changing the copy leaves p alone.
func clone(p config.Provider) config.Provider {
	q := p
	v := reflect.ValueOf(p.Block).Elem()
	n := reflect.New(v.Type())
	n.Elem().Set(v)
	for i := range v.NumField() {
		if f := n.Elem().Field(i); f.Kind() == reflect.Slice && !f.IsNil() {
			c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(c, f)
			f.Set(c)
		}
	}
	q.Block = n.Interface().(config.Block)
	return q
}

func TestFieldErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    config.FieldError
		want string
	}{
		{config.FieldError{"p.yml", 3, 5, "providers[0].name", "bad"}, "p.yml:3:5: providers[0].name: bad"},
		{config.FieldError{"p.yml", 3, 0, "", "bad"}, "p.yml:3: bad"},
		{config.FieldError{"p.yml", 0, 0, "", "bad"}, "p.yml: bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	es := config.Errors{{"a", 1, 1, "x", "m"}, {"a", 2, 1, "y", "n"}}
	if got := es.Error(); got != "a:1:1: x: m\na:2:1: y: n" {
		t.Errorf("Errors.Error() = %q", got)
	}
}

// names returns the provider names of c in file order.
func names(c *config.Config) []string {
	var out []string
	for _, p := range c.Providers {
		out = append(out, p.Name)
	}
	return out
}

// TestHostBoundMustFitTheRound: a kvm provider whose bounds the file sets add up to more than
// a round's deadline is refused with the block's position and the arithmetic; one that fits, the
// defaults at the shortest derived round (10s), and a file loaded with checks off (0) are accepted.
func TestHostBoundMustFitTheRound(t *testing.T) {
	const file = `providers:
  - name: kvm-a
    type: kvm
    kvm:
      user: root
      privateKeyFile: /k
      insecureSkipHostKeyVerification: true
      storagePool: default
      sshTimeout: 5s
      hosts: [{address: 198.18.0.1}]
  - name: kvm-b
    type: kvm
    kvm:
      user: root
      privateKeyFile: /k
      insecureSkipHostKeyVerification: true
      storagePool: default
      hosts: [{address: 198.18.0.2}]
`
	_, err := config.ParseFor("p.yml", []byte(file), 10*time.Second)
	want := "p.yml:4:5: providers[0].kvm: a host's bounds add up to more than a round's deadline of 10s (--provider-check-timeout): " +
		"tcpTimeout 2s + 2 × sshTimeout 5s + 2 × libvirtTimeout 1s + 4 calls × rpcTimeout 500ms = 16s; " +
		"a host that runs them out would hold its concurrency slot past the round. Lower the bounds or raise the timeout"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	for _, timeout := range []time.Duration{16 * time.Second, 0} {
		if _, err := config.ParseFor("p.yml", []byte(file), timeout); err != nil {
			t.Errorf("round deadline %v: %v, want accepted", timeout, err)
		}
	}
	k := kvm.Config{TCPTimeout: kvm.DefaultTCPTimeout, SSHTimeout: kvm.DefaultSSHTimeout,
		LibvirtTimeout: kvm.DefaultLibvirtTimeout, RPCTimeout: kvm.DefaultRPCTimeout}
	if b := k.HostBound(); b > 10*time.Second {
		t.Errorf("the default bounds add up to %v: they must fit the shortest round the flags derive (10s)", b)
	}
}

// TestHostBoundsDerivedFromAShortRound: the bounds a kvm block does not set are derived from a
// round's deadline shorter than their defaults' sum (10s): each default scaled by one factor,
// rounded down to the millisecond, so that they fit; bounds the block sets are kept as they are,
// and the derived ones fill what they leave. Bounds the block sets that leave too little room for
// the others at their minimum (10ms) are refused, the derived ones marked in the arithmetic.
func TestHostBoundsDerivedFromAShortRound(t *testing.T) {
	block := func(extra string) string {
		return "providers:\n  - name: kvm-a\n    type: kvm\n    kvm:\n      user: root\n      privateKeyFile: /k\n" +
			"      insecureSkipHostKeyVerification: true\n      storagePool: default\n" + extra +
			"      hosts: [{address: 198.18.0.1}]\n"
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name                   string
		extra                  string
		round                  time.Duration
		tcp, ssh, libvirt, rpc time.Duration
	}{
		{"defaults fit", "", 10 * time.Second, 2 * time.Second, 2 * time.Second, time.Second, 500 * ms},
		{"all derived", "", 3 * time.Second, 600 * ms, 600 * ms, 300 * ms, 150 * ms},
		{"an empty value is not set", "      tcpTimeout: \"\"\n      rpcTimeout: null\n", 3 * time.Second, 600 * ms, 600 * ms, 300 * ms, 150 * ms},
		{"set ones kept", "      sshTimeout: 1s\n", 4 * time.Second, 666 * ms, time.Second, 333 * ms, 166 * ms},
		{"a set one at its default is set", "      tcpTimeout: 2s\n", 6 * time.Second, 2 * time.Second, time.Second, 500 * ms, 250 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.ParseFor("p.yml", []byte(block(tc.extra)), tc.round)
			if err != nil {
				t.Fatal(err)
			}
			k := c.Providers[0].Block.(*kvm.Config)
			got := []time.Duration{k.TCPTimeout, k.SSHTimeout, k.LibvirtTimeout, k.RPCTimeout}
			want := []time.Duration{tc.tcp, tc.ssh, tc.libvirt, tc.rpc}
			if !slices.Equal(got, want) {
				t.Errorf("bounds (tcp, ssh, libvirt, rpc) %v, want %v", got, want)
			}
			if b := k.HostBound(); b > tc.round {
				t.Errorf("the bounds add up to %v (%s), more than the round's %v", b, k.HostBoundArithmetic(), tc.round)
			}
		})
	}
	_, err := config.ParseFor("p.yml", []byte(block("      sshTimeout: 1s\n      libvirtTimeout: 490ms\n")), 3*time.Second)
	want := "p.yml:4:5: providers[0].kvm: a host's bounds add up to more than a round's deadline of 3s (--provider-check-timeout): " +
		"tcpTimeout 10ms (derived) + 2 × sshTimeout 1s + 2 × libvirtTimeout 490ms + 4 calls × rpcTimeout 10ms (derived) = 3.03s; " +
		"a host that runs them out would hold its concurrency slot past the round. Lower the bounds or raise the timeout"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
