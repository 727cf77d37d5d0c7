package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/promstack"
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
	env.ApplyCRDFile(t, filepath.Join("deploy", "crd", "providerhealth.io_providerhealths.yaml"))
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

	x := startExporter(t, "http", "--config.file="+providers, "--provider-check-interval=10s",
		"--crd.enabled", "--crd.kubeconfig="+env.Kubeconfig, "--crd.heartbeat-interval=1m")
	waitFor(t, 30*time.Second, "/-/ready", func() bool { code, _ := x.get("/-/ready"); return code == http.StatusOK })

	// The verdicts in /metrics: every target up.
	_, body := x.get("/metrics")
	if v, ok := metric(t, body, `proxy_operator_provider_target_reason{provider="gce-untrusted",reason="CredentialsError"`); !ok || v != 1 {
		t.Errorf("the provider whose key the token endpoint does not trust: CredentialsError = %v (present %v), want 1", v, ok)
	}
	for _, series := range []string{
		`proxy_operator_provider_target_up{provider="cluster"`,
		`proxy_operator_provider_target_up{provider="gce",target="` + gcefake.DefaultProject + `"}`,
		`proxy_operator_provider_target_up{provider="hypervisors",target="` + kvm.Hosts[0].Name + `"}`,
		`proxy_operator_provider_target_up{provider="hypervisors",target="` + kvm.Hosts[1].Name + `"}`,
	} {
		if v, ok := metric(t, body, series); !ok || v != 1 {
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
	waitFor(t, 30*time.Second, "kubectl get ph to show every provider ready", func() bool {
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
	waitFor(t, 30*time.Second, "the stopped libvirtd to show in /metrics", func() bool {
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
	waitFor(t, 30*time.Second, "kubectl get ph to show the fault", func() bool {
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

	// A reload that removes a provider deletes its object; the others stay.
	write(kubernetesBlock, kvmBlock)
	if code, body := x.do(http.MethodPost, "/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "the removed provider's object to be deleted", func() bool {
		rows = getPH()
		_, gone := rows["gce"]
		_, gone2 := rows["gce-untrusted"]
		return !gone && !gone2 && len(rows) == 2
	})

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
