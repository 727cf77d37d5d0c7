// Package demo starts the local environment that `make demo` runs and the end-to-end test checks:
// a Kubernetes API server holding the ProviderHealth CRD, KVM hosts, the GCE wire server with
// instances, a vCenter simulator, and a providers file that covers all four provider types. Every part comes from
// test/testenv; this package only puts them together, so the demo a newcomer runs is the
// environment the end-to-end test proves.
//
// The parts are started through a testing.TB. A test passes its own; the demo launcher
// (cmd/phe-demo) passes a Session, which runs the same helpers outside a test.
package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
)

// Provider names in the providers file Start writes (also the ProviderHealth objects' names).
const (
	KubernetesProvider = "cluster"
	GCPProvider        = "gce"
	KVMProvider        = "hypervisors"
	VSphereProvider    = "vcenter"
)

// GCEInstances is how many instances the GCE wire server holds in the demo project.
const GCEInstances = 3

// Options configure Start.
type Options struct {
	// CRDFile is the CRD manifest to install, or a directory of them (deploy/crd/ in the repository: ProviderHealth and ProviderHealthPart).
	CRDFile string
	// KVMHosts is how many KVM hosts to start; 0 means 3.
	KVMHosts int
	// Logf, when set, receives a line as each part is ready (the demo's progress output).
	Logf func(format string, args ...any)
}

// Env is the running environment.
type Env struct {
	Kube  *kube.Env
	Fleet *kvmhost.Fleet
	GCE   *gcefake.Server
	VCSim *vcsim.Sim
	// ProvidersFile is the path of the providers file: one kubernetes provider (the API server
	// itself), one gcp provider (the wire server, through the real OAuth flow), one kvm
	// provider (every host) and one vsphere provider (the simulator, over TLS verified against
	// its CA, logged in once).
	ProvidersFile string
}

// Start starts the API server and installs the CRD, the KVM hosts and the GCE wire server, and
// writes the providers file. Everything stops in tb's cleanup. A part this machine cannot run
// ends tb through testenv.Unavailable (see each part).
func Start(tb testing.TB, opts Options) *Env {
	tb.Helper()
	if opts.KVMHosts == 0 {
		opts.KVMHosts = 3
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	e := &Env{}
	e.Kube = kube.Start(tb)
	e.Kube.ApplyCRDFile(tb, opts.CRDFile)
	logf("Kubernetes API server ready at %s, ProviderHealth CRD installed", e.Kube.URL)
	e.Fleet = kvmhost.Start(tb, opts.KVMHosts)
	names := make([]string, len(e.Fleet.Hosts))
	for i, h := range e.Fleet.Hosts {
		names[i] = h.Name + " (" + h.Addr + ")"
	}
	logf("KVM hosts ready: %s", strings.Join(names, ", "))
	e.GCE = gcefake.Start(tb)
	e.GCE.AddInstances(gcefake.DefaultProject, gcefake.DefaultZones[0], GCEInstances, map[string]string{"managed-by": "proxy-operator"})
	logf("GCE wire server ready at %s, project %s with %d instances", e.GCE.URL(), gcefake.DefaultProject, GCEInstances)
	e.VCSim = vcsim.Start(tb, vcsim.Options{})
	logf("vCenter simulator ready at %s", e.VCSim.URL())

	e.ProvidersFile = filepath.Join(tb.TempDir(), "providers.yml")
	if err := os.WriteFile(e.ProvidersFile, []byte(e.providers(e.GCE.ServiceAccountKey(tb))), 0o600); err != nil {
		tb.Fatalf("demo: write the providers file: %v", err)
	}
	return e
}

// providers renders the providers file.
func (e *Env) providers(gceKey string) string {
	kvm := e.Fleet.KVMConfig()
	var hosts strings.Builder
	for _, h := range kvm.Hosts {
		fmt.Fprintf(&hosts, "        - {address: %q, name: %s}\n", h.Address, h.Name)
	}
	return fmt.Sprintf(`providers:
  - name: %s
    type: kubernetes
    kubernetes:
      kubeconfig: %s
      labelSelector: ""
  - name: %s
    type: gcp
    gcp:
      project: %s
      credentialsFile: %s
      endpoint: %s
  - name: %s
    type: kvm
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      hosts:
%s  - name: %s
    type: vsphere
    vsphere:
      url: %s
      usernameFile: %s
      passwordFile: %s
      caFile: %s
`, KubernetesProvider, e.Kube.Kubeconfig,
		GCPProvider, gcefake.DefaultProject, gceKey, e.GCE.URL(),
		KVMProvider, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool, hosts.String(),
		VSphereProvider, e.VCSim.URL(), e.VCSim.UsernameFile(), e.VCSim.PasswordFile(), e.VCSim.CAFile())
}

// Targets is the number of targets the providers report: one per provider, except the kvm
// provider, which has one per host, and the vsphere provider, which has the vCenter's and one
// per ESXi host of the simulator's inventory.
func (e *Env) Targets() int { return 3 + len(e.Fleet.Hosts) + vsphereHosts }

// VSphereTargets is the number of targets of the vsphere provider: the vCenter and its ESXi hosts.
const VSphereTargets = 1 + vsphereHosts

// vsphereHosts are the ESXi hosts of the simulator's one datacenter: DC0_H0 and DC0_C0_H0..H2.
const vsphereHosts = 4

// BreakCommand is a shell command that makes KVM host i refuse SSH: a firewall rule in the host's
// network namespace that answers every packet to port 22 with a TCP reset. The exporter's pooled
// connection is reset and every new one refused, so the host reads TCPUnreachable.
// RepairCommand removes the rule.
func (e *Env) BreakCommand(i int) string { return e.firewall(i, "-I") }

// RepairCommand undoes BreakCommand.
func (e *Env) RepairCommand(i int) string { return e.firewall(i, "-D") }

func (e *Env) firewall(i int, op string) string {
	return strings.Join(e.Fleet.Hosts[i].NetNSCommand(
		"iptables", "-w", op, "INPUT", "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset"), " ")
}

// BuildExporter builds the exporter binary from the repository at root (the directory of
// go.mod) into a temporary directory of tb, as a user would run it, and returns its path. A
// machine without Go ends tb through testenv.Unavailable; under -short it skips the test.
func BuildExporter(tb testing.TB, root string) string {
	tb.Helper()
	testenv.SkipIfShort(tb, "builds the exporter binary with go build")
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(tb, "building the exporter binary needs Go on PATH: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), "provider_health_exporter")
	cmd := exec.Command(goBin, "build", "-o", bin, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("demo: go build the exporter: %v\n%s", err, out)
	}
	return bin
}

// DemoWindows are the mixin's _config overrides of the demo: an alert fires about half a minute
// after a host breaks, instead of the production windows of several minutes; availability is
// sampled every 10s into 1m buckets, over windows of 10m, 30m and 1h (the budget's), and the
// burn-rate pairs are minutes long, so the availability series fill within minutes, not days.
const DemoWindows = `{targetDownFor: "30s", providerDownFor: "30s", providerDownKeepFiringFor: "10s",
 availabilityInterval: "10s", availabilityBucket: "1m", availabilityBucketedFrom: "10m",
 availabilityEvaluationInterval: "15s", availabilityWindows: ["10m", "30m", "1h"], availabilityBudgetWindow: "1h",
 availabilityBurnRates: {
  fast: {severity: "critical", "for": "30s", windows: [{long: "2m", short: "30s", factor: 14.4}, {long: "5m", short: "1m", factor: 6}]},
  slow: {severity: "warning", "for": "2m", windows: [{long: "10m", short: "2m", factor: 3}, {long: "30m", short: "5m", factor: 1}]},
 }}`

// MixinRules renders the mixin's alerts and recording rules from its jsonnet sources in
// root/mixin, with config (a jsonnet object of _config overrides, e.g. DemoWindows) as the
// top-level argument, into tb's temporary directory, and returns the two files' paths. It runs
// go-jsonnet from the tools module, as make mixin does.
func MixinRules(tb testing.TB, root, config string) []string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(tb, "rendering the mixin needs Go on PATH: %v", err)
	}
	dir := tb.TempDir()
	var files []string
	for _, name := range []string{"alerts", "rules"} {
		cmd := exec.Command(goBin, "tool", "-modfile=tools/go.mod", "jsonnet", "-J", "mixin", "-S",
			"--tla-code", "config="+config, filepath.Join("mixin", name+".jsonnet"))
		cmd.Dir = root
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			tb.Fatalf("demo: render the mixin's %s: %v\n%s", name, err, stderr.String())
		}
		path := filepath.Join(dir, "prometheus_"+name+".yaml")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			tb.Fatalf("demo: %v", err)
		}
		files = append(files, path)
	}
	return files
}
