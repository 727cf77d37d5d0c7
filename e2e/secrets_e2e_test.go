package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestSecretFilesEndToEnd: two vsphere providers whose usernameFile names a secret file, the
// provider's own passwordFile and another type's (a gcp provider's credentialsFile), log in with
// the secret as the username. vCenter refuses them, and no answer of the exporter (/metrics, the
// status page, /api/v1/status, a debug probe) holds either secret: the messages say the user
// was [redacted].
func TestSecretFilesEndToEnd(t *testing.T) {
	sim := vcsim.Start(t, vcsim.Options{})
	gcpKey := filepath.Join(t.TempDir(), "gcp-key")
	const gcpSecret = "e2e-gcp-secret-0123456789"
	if err := os.WriteFile(gcpKey, []byte(gcpSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, srv := startProbeExporter(t, fmt.Sprintf(`providers:
  - name: gcp
    type: gcp
    gcp:
      project: my-project
      credentialsFile: %[5]s
      endpoint: https://127.0.0.1:9
  - name: vc-own
    type: vsphere
    vsphere: {url: %[1]s, usernameFile: %[3]s, passwordFile: %[3]s, caFile: %[4]s}
  - name: vc-cross
    type: vsphere
    vsphere: {url: %[1]s, usernameFile: %[5]s, passwordFile: %[3]s, caFile: %[4]s}
`, sim.URL(), sim.UsernameFile(), sim.PasswordFile(), sim.CAFile(), gcpKey), time.Minute, 15*time.Second)
	client := &http.Client{Timeout: 30 * time.Second}
	secrets := []string{sim.Password(), gcpSecret}

	_, metrics := testutil.Fetch(t, client, srv.URL+"/metrics")
	noSecrets(t, "/metrics", metrics, secrets)
	_, page := testutil.Fetch(t, client, srv.URL+"/")
	noSecrets(t, "the status page", page, secrets)
	code, api := testutil.Fetch(t, client, srv.URL+"/api/v1/status")
	if code != http.StatusOK || strings.Count(api, `login of user \"[redacted]\" refused`) < 2 {
		t.Errorf("/api/v1/status: %d, want both vsphere providers' messages naming the user [redacted]:\n%s", code, api)
	}
	noSecrets(t, "/api/v1/status", api, secrets)
	for _, p := range []string{"vc-own", "vc-cross"} {
		code, body := testutil.Fetch(t, client, srv.URL+"/probe?provider="+p+"&target="+sim.Host()+"&debug=true")
		if code != http.StatusOK || !strings.Contains(body, "Unauthorized") || !strings.Contains(body, "[redacted]") {
			t.Errorf("debug probe of %s: %d, want Unauthorized naming the user [redacted]:\n%s", p, code, body)
		}
		noSecrets(t, "the debug probe of "+p, body, secrets)
	}
}
