package chain

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// TestScaleDurations: every duration string, however deep, is divided; other values, strings
// that only look like numbers and label values are left as they are.
func TestScaleDurations(t *testing.T) {
	var in any
	if err := json.Unmarshal([]byte(`{"for":"5m","windows":[{"long":"1h","short":"30s","factor":14.4}],"severity":"critical","n":3,"selector":"job=\"x\"","odd":"1h30m","plain":"5"}`), &in); err != nil {
		t.Fatal(err)
	}
	out, err := ScaleDurations(in, 60)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(out)
	want := `{"for":"5s","n":3,"odd":"90s","plain":"5","selector":"job=\"x\"","severity":"critical","windows":[{"factor":14.4,"long":"60s","short":"500ms"}]}`
	if string(got) != want {
		t.Errorf("scaled:\n got %s\nwant %s", got, want)
	}
}

// TestRoot: the repository's root is found from a package directory.
func TestRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Errorf("root %s has no go.mod: %v", root, err)
	}
}

// An overridden key keeps its own value; the others are scaled.
func TestRenderWith(t *testing.T) {
	testenv.SkipIfShort(t, "renders the mixin with go tool jsonnet")
	m := RenderWith(t, 30, map[string]any{"exporterDownFor": "1m"})
	var alerts struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				For   string `json:"for"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(m.RuleFiles["prometheus_alerts.yaml"], &alerts); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			got[r.Alert] = r.For
		}
	}
	if got["ProviderHealthExporterDown"] != "1m" || got["ProviderHealthTargetDown"] != "10s" {
		t.Errorf("for: ExporterDown %q, TargetDown %q; want 1m (overridden) and 10s (5m/30)", got["ProviderHealthExporterDown"], got["ProviderHealthTargetDown"])
	}
}
