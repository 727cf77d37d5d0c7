package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestGoogleAuthAgainstAPIServer: with `auth: google` the checker gets a Google OAuth access
// token itself, through the real JWT-bearer exchange with the GCE wire fake's token endpoint
// (the key's token_uri), and presents it to a real kube-apiserver whose token webhook accepts
// the fake's tokens as their service account's email, as GKE's does. The kubeconfig is the
// shape `gcloud container clusters get-credentials` writes: its user runs the exec plugin
// gke-gcloud-auth-plugin, which is not on this machine (nor in the image) and is not used.
func TestGoogleAuthAgainstAPIServer(t *testing.T) {
	env := kube.Start(t)
	gce := gcefake.Start(t)
	env.AcceptTokens(gce.TokenInfo)
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)
	logs := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	key := gce.ServiceAccountKey(t)
	email := keyEmail(t, key)
	bindClusterRole(t, admin, "google-list-pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}, email)
	unbound := gce.ServiceAccountKey(t) // a key Google trusts, for an account RBAC knows nothing of

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"gke_proj_zone_c1": {Server: env.URL, CertificateAuthorityData: env.CAData}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"gke_proj_zone_c1": {Exec: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1beta1", Command: "gke-gcloud-auth-plugin", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}}},
		Contexts:       map[string]*clientcmdapi.Context{"gke_proj_zone_c1": {Cluster: "gke_proj_zone_c1", AuthInfo: "gke_proj_zone_c1"}},
		CurrentContext: "gke_proj_zone_c1",
	}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	google := func(keyFile string) func(*Config) {
		return func(kc *Config) { kc.Auth, kc.CredentialsFile = AuthGoogle, keyFile }
	}
	expect := func(t *testing.T, keyFile string, want checks.Reason, wantIn string) checks.TargetResult {
		t.Helper()
		r := checkOnce(t, newChecker(t, provider("gke-main", kubeconfig, "", google(keyFile)), logger), context.Background())
		t.Logf("%s: %s", r.Reason, r.Message)
		if r.Reason != want || !strings.Contains(r.Message, wantIn) {
			t.Errorf("reason %s, message %q; want %s, a message containing %q", r.Reason, r.Message, want, wantIn)
		}
		if r.Target != "gke_proj_zone_c1" {
			t.Errorf("target %q, want the kubeconfig's context", r.Target)
		}
		return r
	}

	t.Run("ReadyWithKeyFile", func(t *testing.T) {
		before := gce.TokenRequests()
		expect(t, key, checks.ReasonReady, "listed pods (v1) in all namespaces")
		if gce.TokenRequests() == before {
			t.Errorf("no token exchange with the key's token_uri: the check did not authenticate with Google")
		}
	})
	// The Google library's transport hides the one under it: Close must still reach it.
	t.Run("CloseClosesConnections", func(t *testing.T) {
		port := env.URL[strings.LastIndex(env.URL, ":")+1:]
		before := socketsTo(t, port)
		c := newChecker(t, provider("gke-main", kubeconfig, "", google(key)), logger)
		if r := checkOnce(t, c, context.Background()); r.Reason != checks.ReasonReady {
			t.Fatalf("reason %s: %s", r.Reason, r.Message)
		}
		opened := 0
		for inode := range socketsTo(t, port) {
			if !before[inode] {
				opened++
			}
		}
		if opened == 0 {
			t.Fatalf("the check left no connection to the API server open: nothing for Close to close")
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for inode := range socketsTo(t, port) {
			if !before[inode] {
				t.Errorf("socket %s to the API server still open after Close (%d opened by the check)", inode, opened)
			}
		}
	})
	t.Run("UntrustedKeyIsUnauthorized", func(t *testing.T) {
		expect(t, gce.UntrustedServiceAccountKey(t), checks.ReasonUnauthorized, "Google's token endpoint refused the credentials (400)")
	})
	t.Run("AccountWithoutRBACIsForbidden", func(t *testing.T) {
		expect(t, unbound, checks.ReasonForbidden, keyEmail(t, unbound))
	})
	t.Run("TokenEndpointDownIsUnreachable", func(t *testing.T) {
		down := gcefake.Start(t)
		k := down.ServiceAccountKey(t)
		down.Close()
		expect(t, k, checks.ReasonAPIUnreachable, "cannot reach Google's token endpoint")
	})
	t.Run("BrokenKeyIsConfigError", func(t *testing.T) {
		broken := filepath.Join(t.TempDir(), "key.json")
		if err := os.WriteFile(broken, []byte(`{"type": "service_account", "private_key": "not a key"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		expect(t, broken, ReasonConfigError, "private_key is not PEM-encoded")
	})

	for _, tok := range gce.IssuedTokens() {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("an access token appears in the logs")
		}
	}
}

// keyEmail is the service account a key file is for.
func keyEmail(t *testing.T, path string) string {
	t.Helper()
	var f struct {
		ClientEmail string `json:"client_email"`
	}
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &f) != nil || f.ClientEmail == "" {
		t.Fatalf("key file %s: %v", path, err)
	}
	return f.ClientEmail
}
