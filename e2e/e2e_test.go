package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestEndToEnd runs the exporter as a user would, against the real systems of the test
// environment: a Kubernetes API server (checked, and holding the ProviderHealth objects), a GCE
// wire server with the real OAuth flow, two KVM hosts over SSH + libvirt. It checks the verdicts
// where users read them (the metrics scraped by a real Prometheus, `kubectl get ph`), a real
// fault on a host, and a reload that removes a provider.
func TestEndToEnd(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH")
	}
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	gce := gcefake.Start(t)
	gce.AddInstances(gcefake.DefaultProject, gcefake.DefaultZones[0], 3, map[string]string{"managed-by": "proxy-operator"})
	fleet := kvmhost.Start(t, 2)
	kvm := fleet.KVMConfig()

	var hosts strings.Builder
	for _, h := range kvm.Hosts {
		fmt.Fprintf(&hosts, "        - {address: %q, name: %s}\n", h.Address, h.Name)
	}
	kubernetesBlock := fmt.Sprintf(`  - name: cluster
    type: kubernetes
    kubernetes:
      kubeconfig: %s
`, env.Kubeconfig)
	gceKey, untrustedKey := gce.ServiceAccountKey(t), gce.UntrustedServiceAccountKey(t)
	gcpBlock := fmt.Sprintf(`  - name: gce
    type: gcp
    gcp:
      project: %s
      credentialsFile: %s
      endpoint: %s
  - name: gce-untrusted
    type: gcp
    gcp:
      project: %[1]s
      credentialsFile: %[4]s
      endpoint: %[3]s
`, gcefake.DefaultProject, gceKey, gce.URL(), untrustedKey)
	kvmBlock := fmt.Sprintf(`  - name: hypervisors
    type: kvm
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      hosts:
%s`, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool, hosts.String())
	providers := filepath.Join(t.TempDir(), "providers.yml")
	write := func(blocks ...string) {
		t.Helper()
		if err := os.WriteFile(providers, []byte("providers:\n"+strings.Join(blocks, "")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(kubernetesBlock, gcpBlock, kvmBlock)

	x := startExporter(t, "--config.file="+providers, "--provider-check-interval=10s",
		"--crd.enabled", "--crd.kubeconfig="+env.Kubeconfig, "--crd.heartbeat-interval=1m", "--web.enable-lifecycle")
	testutil.Eventually(t, 30*time.Second, "/-/ready", func() bool { code, _ := x.get("/-/ready"); return code == http.StatusOK })

	// The verdicts in /metrics: every target up.
	_, body := x.get("/metrics")
	if v, ok := testutil.Metric(t, body, `proxy_operator_provider_target_reason{provider="gce-untrusted",reason="CredentialsError"`); !ok || v != 1 {
		t.Errorf("the provider whose key the token endpoint does not trust: CredentialsError = %v (present %v), want 1", v, ok)
	}
	for _, series := range []string{
		`proxy_operator_provider_target_up{provider="cluster"`,
		`proxy_operator_provider_target_up{provider="gce",target="` + gcefake.DefaultProject + `"}`,
		`proxy_operator_provider_target_up{provider="hypervisors",target="` + kvm.Hosts[0].Name + `"}`,
		`proxy_operator_provider_target_up{provider="hypervisors",target="` + kvm.Hosts[1].Name + `"}`,
	} {
		if v, ok := testutil.Metric(t, body, series); !ok || v != 1 {
			t.Errorf("%s = %v (present %v), want 1; logs:\n%s", series, v, ok, x.logs.String())
		}
	}

	// The same verdicts through a real Prometheus scraping the exporter.
	stack := promstack.Start(t, promstack.Options{ScrapeTargets: []string{strings.TrimPrefix(x.base, "http://")}})
	stack.WaitForQuery(t, `sum(proxy_operator_provider_target_up)`, func(s []promstack.Sample) bool {
		return len(s) == 1 && s[0].Value == 4
	}, 60*time.Second)

	// kubectl get ph: one object per provider, Ready, with its targets counted.
	getPH := func() map[string][]string {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "ph", "--no-headers").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get ph: %v\n%s", err, out)
		}
		rows := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) >= 5 {
				rows[f[0]] = f[1:4] // READY, REASON, TARGETS
			}
		}
		return rows
	}
	want := map[string]string{"cluster": "True AllTargetsReady 1/1", "gce": "True AllTargetsReady 1/1",
		"gce-untrusted": "False CredentialsError 0/1", "hypervisors": "True AllTargetsReady 2/2"}
	var rows map[string][]string
	testutil.Eventually(t, 30*time.Second, "kubectl get ph to show every provider ready", func() bool {
		rows = getPH()
		for name, w := range want {
			if strings.Join(rows[name], " ") != w {
				return false
			}
		}
		return len(rows) == len(want)
	})

	// A real fault: libvirtd stops on one host. The next round reports it in the metrics and in
	// the object, with the same reason in both.
	fleet.Hosts[1].StopLibvirtd()
	reasonPrefix := `proxy_operator_provider_target_reason{provider="hypervisors",reason="`
	var reason string
	testutil.Eventually(t, 30*time.Second, "the stopped libvirtd to show in /metrics", func() bool {
		_, body := x.get("/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, reasonPrefix) && strings.Contains(line, `target="`+kvm.Hosts[1].Name+`"`) {
				reason = strings.SplitN(line[len(reasonPrefix):], `"`, 2)[0]
			}
		}
		return reason != "" && reason != "Ready"
	})
	if reason != "LibvirtSocketUnreachable" && reason != "LibvirtConnectFailed" {
		t.Errorf("a stopped libvirtd reads %s, want LibvirtSocketUnreachable or LibvirtConnectFailed", reason)
	}
	testutil.Eventually(t, 30*time.Second, "kubectl get ph to show the fault", func() bool {
		rows = getPH()
		return strings.Join(rows["hypervisors"], " ") == "False "+reason+" 1/2"
	})
	out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "describe", "ph", "hypervisors").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl describe ph: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), kvm.Hosts[1].Name) || !strings.Contains(string(out), reason) {
		t.Errorf("kubectl describe ph hypervisors does not name the down host and its reason:\n%s", out)
	}

	// A reload that removes providers deletes their objects, keeps the others, and closes the
	// removed KVM provider's connections (seen from the hosts).
	for _, h := range fleet.Hosts {
		if n := h.TCPConnections(); n != 1 {
			t.Errorf("%s: %d SSH connections before the reload, want 1 (pooled)", h.Name, n)
		}
	}
	// The kept provider's transition times (Ready condition and target) survive the reload.
	times := func() string {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "ph", "cluster", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].lastTransitionTime} {.status.targets[*].lastTransitionTime}`).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get ph cluster: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	before := times()
	if f := strings.Fields(before); len(f) != 2 {
		t.Fatalf("transition times of cluster: %q, want the Ready condition's and one target's", before)
	}
	write(kubernetesBlock)
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %s", code, body)
	}
	testutil.Eventually(t, 30*time.Second, "the removed providers' objects to be deleted", func() bool {
		rows = getPH()
		_, kept := rows["cluster"]
		return kept && len(rows) == 1
	})
	testutil.Eventually(t, 30*time.Second, "the removed KVM provider's connections to close", func() bool {
		return fleet.Hosts[0].TCPConnections() == 0 && fleet.Hosts[1].TCPConnections() == 0
	})
	// Let a round pass after the reload: the times must still be those from before it.
	round := func() float64 {
		_, body := x.get("/metrics")
		v, _ := testutil.Metric(t, body, "proxy_operator_provider_check_rounds_total")
		return v
	}
	r0 := round()
	testutil.Eventually(t, 30*time.Second, "a round after the reload", func() bool { return round() > r0 })
	if after := times(); after != before {
		t.Errorf("transition times of the kept provider moved across the reload: %q -> %q", before, after)
	}

	// No credential of the test reaches the logs, the metrics or the status page: GCE access
	// tokens, the Kubernetes bearer token, the SSH private key.
	secrets := append([]string{env.AdminConfig.BearerToken}, gce.IssuedTokens()...)
	for _, path := range []string{kvm.PrivateKeyFile, gceKey, untrustedKey} {
		key, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The PEM body's lines (in a JSON key file, joined by \n escapes).
		for _, line := range strings.FieldsFunc(string(key), func(r rune) bool { return r == '\n' || r == '\\' || r == '"' }) {
			if len(line) > 40 && strings.Trim(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == "" {
				secrets = append(secrets, line)
			}
		}
	}
	if len(secrets) < 10 {
		t.Fatalf("only %d secrets to look for", len(secrets))
	}
	_, body = x.get("/metrics")
	_, page := x.get("/")
	for i, secret := range secrets {
		if secret == "" {
			t.Fatalf("secret %d is empty", i)
		}
		for where, text := range map[string]string{"logs": x.logs.String(), "metrics": body, "status page": page} {
			if strings.Contains(text, secret) {
				t.Errorf("secret %d of the test appears in the %s", i, where)
			}
		}
	}
}

// TestChecksOffDeletesOursOnly runs the exporter with checks off and the writer on, against the
// real API server: ProviderHealth objects of this deployment (its labels and deployment
// annotation) are deleted, even those of providers still in the file (they would only go stale);
// an object of another tool, and one with the exporter's managed-by label but no deployment it can
// be told to belong to, are left alone.
func TestChecksOffDeletesOursOnly(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Unavailable(t, "kubectl is not on PATH")
	}
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	objects := `apiVersion: providerhealth.io/v1alpha1
kind: ProviderHealth
metadata:
  name: ours-configured
  labels: {app.kubernetes.io/managed-by: provider-health-exporter, providerhealth.io/instance: provider-health-exporter}
  annotations: {providerhealth.io/deployment: default/provider-health-exporter}
---
apiVersion: providerhealth.io/v1alpha1
kind: ProviderHealth
metadata:
  name: no-deployment
  labels: {app.kubernetes.io/managed-by: provider-health-exporter}
---
apiVersion: providerhealth.io/v1alpha1
kind: ProviderHealth
metadata:
  name: ours-removed
  labels: {app.kubernetes.io/managed-by: provider-health-exporter, providerhealth.io/instance: provider-health-exporter}
  annotations: {providerhealth.io/deployment: default/provider-health-exporter}
---
apiVersion: providerhealth.io/v1alpha1
kind: ProviderHealth
metadata:
  name: someone-elses
  labels: {app.kubernetes.io/managed-by: another-tool}
`
	apply := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(objects)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	names := func() string {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "ph", "-o", "name").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get ph: %v\n%s", err, out)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got := names(); got != "providerhealth.providerhealth.io/no-deployment providerhealth.providerhealth.io/ours-configured providerhealth.providerhealth.io/ours-removed providerhealth.providerhealth.io/someone-elses" {
		t.Fatalf("objects before the exporter starts: %s", got)
	}

	gce := startGCE(t)
	providers := gce.writeProviders(t, "", gcpProvider{"ours-configured", "ours-project"})
	x := startExporter(t, "--config.file="+providers, "--provider-check-interval=0",
		"--crd.enabled", "--crd.kubeconfig="+env.Kubeconfig)
	testutil.Eventually(t, 30*time.Second, "the exporter's objects to be deleted", func() bool {
		return names() == "providerhealth.providerhealth.io/no-deployment providerhealth.providerhealth.io/someone-elses"
	})
	if code, _ := x.get("/-/ready"); code != http.StatusOK {
		t.Errorf("/-/ready with checks off: %d, want 200", code)
	}
	if n := gce.server.InstancesRequests(); n != 0 {
		t.Errorf("checks off, but the provider was checked: %d requests to its API", n)
	}
}
