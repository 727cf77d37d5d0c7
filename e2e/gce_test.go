package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
)

// gceChecks are the checks of the tests that need providers but not a particular system: gcp
// providers checking projects of a GCE wire server through the real OAuth flow, each project's
// one target Ready until the test makes the server fail. (The in-process tests of the other
// packages use test/fakechecks; a binary has only the real checkers.)
type gceChecks struct {
	server *gcefake.Server
	key    string // the service-account key file, whose token_uri is the server's
}

// gcpProvider is one gcp provider of a providers file: its name and its project (its target).
type gcpProvider struct{ name, project string }

// startGCE starts a GCE wire server for the test.
func startGCE(t *testing.T) *gceChecks {
	t.Helper()
	s := gcefake.Start(t)
	return &gceChecks{server: s, key: s.ServiceAccountKey(t)}
}

// writeProviders writes a providers file of the gcp providers ps to path (a new file in the
// test's temporary directory when path is empty), their projects added to the server, and
// returns its path.
func (g *gceChecks) writeProviders(t *testing.T, path string, ps ...gcpProvider) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, p := range ps {
		g.server.AddProject(p.project)
		fmt.Fprintf(&b, "  - name: %s\n    type: gcp\n    gcp:\n      project: %s\n      credentialsFile: %s\n      endpoint: %s\n",
			p.name, p.project, g.key, g.server.URL())
	}
	if len(ps) == 0 {
		b.Reset()
		b.WriteString("providers: []\n")
	}
	return fakechecks.WriteFile(t, path, b.String())
}
