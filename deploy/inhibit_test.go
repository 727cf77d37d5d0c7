package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// mixinJsonnet renders a mixin entry point with the tools module's jsonnet, as make does.
func mixinJsonnet(t *testing.T, entry string, args ...string) []byte {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(t, "no go command to run jsonnet from the tools module: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"tool", "-modfile=tools/go.mod", "jsonnet", "-J", "mixin", "-S"}, append(args, entry)...)...)
	cmd.Dir = testutil.RepoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jsonnet %s: %v\n%s", entry, err, stderr.String())
	}
	return out
}

// inhibitRulesOf decodes the inhibit_rules of an alertmanager.yml fragment.
func inhibitRulesOf(t *testing.T, raw []byte) []map[string]any {
	t.Helper()
	var doc struct {
		InhibitRules []map[string]any `json:"inhibit_rules"`
	}
	if err := yaml.UnmarshalStrict(raw, &doc); err != nil {
		t.Fatalf("decode inhibit_rules: %v", err)
	}
	if len(doc.InhibitRules) == 0 {
		t.Fatal("no inhibit_rules")
	}
	return doc.InhibitRules
}

// amConfigMatcher is a matcher of an AlertmanagerConfig (monitoring.coreos.com/v1alpha1).
type amConfigMatcher struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	MatchType string `json:"matchType"`
}

// inhibitRulesOfAlertmanagerConfig turns the inhibitRules of deploy/alertmanagerconfig.yaml into
// alertmanager.yml's form, as the Prometheus Operator does with alertmanagerConfigMatcherStrategy
// None (name, match type and the value quoted; no namespace matcher added).
func inhibitRulesOfAlertmanagerConfig(t *testing.T, raw []byte) []map[string]any {
	t.Helper()
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			InhibitRules []struct {
				SourceMatch []amConfigMatcher `json:"sourceMatch"`
				TargetMatch []amConfigMatcher `json:"targetMatch"`
				Equal       []string          `json:"equal"`
			} `json:"inhibitRules"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &obj); err != nil {
		t.Fatalf("decode deploy/alertmanagerconfig.yaml: %v", err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1alpha1" || obj.Kind != "AlertmanagerConfig" || obj.Metadata.Namespace != "provider-health-exporter" {
		t.Fatalf("deploy/alertmanagerconfig.yaml is a %s %s in %q, want an AlertmanagerConfig (monitoring.coreos.com/v1alpha1) in provider-health-exporter", obj.APIVersion, obj.Kind, obj.Metadata.Namespace)
	}
	strs := func(ms []amConfigMatcher) []any {
		var out []any
		for _, m := range ms {
			if !slices.Contains([]string{"=", "!=", "=~", "!~"}, m.MatchType) {
				t.Fatalf("matcher %+v: match type %q", m, m.MatchType)
			}
			out = append(out, fmt.Sprintf("%s%s%q", m.Name, m.MatchType, m.Value))
		}
		return out
	}
	var rules []map[string]any
	for _, r := range obj.Spec.InhibitRules {
		equal := make([]any, 0, len(r.Equal))
		for _, l := range r.Equal {
			equal = append(equal, l)
		}
		rules = append(rules, map[string]any{"source_matchers": strs(r.SourceMatch), "target_matchers": strs(r.TargetMatch), "equal": equal})
	}
	if len(rules) == 0 {
		t.Fatal("deploy/alertmanagerconfig.yaml holds no inhibitRules")
	}
	return rules
}

// TestAlertmanagerConfigFromMixin: deploy/alertmanagerconfig.yaml is what `make deploy-rules`
// generates now, and says what mixin/alertmanager/inhibit_rules.yaml says.
func TestAlertmanagerConfigFromMixin(t *testing.T) {
	root := testutil.RepoRoot(t)
	committed, err := os.ReadFile(filepath.Join(root, "deploy", "alertmanagerconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if generated := mixinJsonnet(t, "deploy/alertmanagerconfig.jsonnet"); !bytes.Equal(generated, committed) {
		t.Errorf("deploy/alertmanagerconfig.yaml differs from what the mixin generates: run make deploy-rules\n--- generated:\n%s", generated)
	}
	plain, err := os.ReadFile(filepath.Join(root, "mixin", "alertmanager", "inhibit_rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := yaml.Marshal(inhibitRulesOfAlertmanagerConfig(t, committed))
	want, _ := yaml.Marshal(inhibitRulesOf(t, plain))
	if !bytes.Equal(got, want) {
		t.Errorf("the AlertmanagerConfig's inhibit rules, as the operator writes them (strategy None):\n%s\nmixin/alertmanager/inhibit_rules.yaml:\n%s", got, want)
	}
}

// TestInhibitRulesOnAlertmanager runs the real Alertmanager (promstack: v0.31.1, one route
// grouped by every label, so each alert that is not muted is one notification to the test's
// webhook) with the mixin's inhibit rules, in each of the forms users install them, and posts
// the alerts Prometheus would send for an outage:
//   - every target of a provider down (ProviderDown and 20 TargetDown): one notification, the
//     ProviderDown; the 20 TargetDown are held by Alertmanager, suppressed, inhibited by it;
//   - 1 of 20 targets down (TargetDown only): one notification, that TargetDown;
//   - one provider down and a target of another provider down: the other provider's TargetDown
//     is notified, not muted by the first provider's ProviderDown.
//
// Every alert carries a cluster label, as Prometheus adds its external labels to every alert
// it sends: in every form, multi-cluster or not, a provider down in one cluster does not mute
// the TargetDown of a provider of the same name in another cluster.
func TestInhibitRulesOnAlertmanager(t *testing.T) {
	root := testutil.RepoRoot(t)
	plain, err := os.ReadFile(filepath.Join(root, "mixin", "alertmanager", "inhibit_rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	amConfig, err := os.ReadFile(filepath.Join(root, "deploy", "alertmanagerconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	forms := []struct {
		name    string
		rules   []map[string]any
		cluster string // the cluster label the alerts carry (Prometheus's external label)
	}{
		{"mixin/alertmanager/inhibit_rules.yaml", inhibitRulesOf(t, plain), "cluster"},
		{"deploy/alertmanagerconfig.yaml", inhibitRulesOfAlertmanagerConfig(t, amConfig), "cluster"},
		{"showMultiCluster", inhibitRulesOf(t, mixinJsonnet(t, "mixin/inhibit_rules.jsonnet", "--tla-code", "config={showMultiCluster: true}")), "cluster"},
		{"clusterLabel k8s_cluster", inhibitRulesOf(t, mixinJsonnet(t, "mixin/inhibit_rules.jsonnet", "--tla-code", "config={clusterLabel: 'k8s_cluster'}")), "k8s_cluster"},
	}
	for _, form := range forms {
		t.Run(strings.ReplaceAll(form.name, "/", "_"), func(t *testing.T) {
			stack := promstack.Start(t, promstack.Options{InhibitRules: form.rules})

			// at labels an alert with its cluster, as Prometheus's external label does.
			at := func(cluster string, labels map[string]string) map[string]string {
				labels[form.cluster] = cluster
				return labels
			}
			providerDown := func(cluster, provider string) promstack.PostableAlert {
				return promstack.PostableAlert{
					Labels:      at(cluster, map[string]string{"alertname": "ProviderHealthProviderDown", "provider": provider, "severity": "critical"}),
					Annotations: map[string]string{"summary": "Every target of a provider is down."},
				}
			}
			targetDown := func(cluster, provider string, i int) promstack.PostableAlert {
				return promstack.PostableAlert{
					Labels:      at(cluster, map[string]string{"alertname": "ProviderHealthTargetDown", "provider": provider, "target": fmt.Sprintf("host-%02d", i), "severity": "warning"}),
					Annotations: map[string]string{"summary": "A provider target is down."},
				}
			}

			type want struct {
				notified   []string // alertname/provider/target of every notification expected
				suppressed int      // TargetDown alerts Alertmanager holds as inhibited
			}
			check := func(t *testing.T, providers []string, alerts []promstack.PostableAlert, w want) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := stack.PostAlert(ctx, alerts...); err != nil {
					t.Fatal(err)
				}
				key := func(l map[string]string) string {
					return l[form.cluster] + "/" + l["alertname"] + "/" + l["provider"] + "/" + l["target"]
				}
				ours := func(l map[string]string) bool { return slices.Contains(providers, l["provider"]) }
				notified := func() []string {
					var out []string
					for _, n := range stack.Notifications() {
						for _, a := range n.Alerts {
							if ours(a.Labels) && a.Status == "firing" {
								out = append(out, key(a.Labels))
							}
						}
					}
					slices.Sort(out)
					return out
				}
				slices.Sort(w.notified)
				// Every expected notification comes (group_wait is 1s); then three more group
				// intervals pass without another one.
				deadline := time.Now().Add(15 * time.Second)
				for len(notified()) < len(w.notified) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				time.Sleep(3 * time.Second)
				if got := notified(); !slices.Equal(got, w.notified) {
					t.Errorf("notifications %v, want %v", got, w.notified)
				}
				held, err := stack.Alerts(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var suppressed, active []string
				for _, a := range held {
					if !ours(a.Labels) {
						continue
					}
					switch {
					case a.Status.State == "suppressed" && len(a.Status.InhibitedBy) > 0:
						suppressed = append(suppressed, key(a.Labels))
					case a.Status.State == "active":
						active = append(active, key(a.Labels))
					}
				}
				if len(suppressed)+len(active) != len(alerts) {
					t.Errorf("Alertmanager holds %d active and %d inhibited of the %d alerts posted: active %v, inhibited %v", len(active), len(suppressed), len(alerts), active, suppressed)
				}
				if len(suppressed) != w.suppressed {
					t.Errorf("%d alerts inhibited, want %d: %v", len(suppressed), w.suppressed, suppressed)
				}
				for _, s := range suppressed {
					if !strings.Contains(s, "/ProviderHealthTargetDown/") {
						t.Errorf("%s is inhibited: only TargetDown may be", s)
					}
				}
			}
			k := func(cluster, alertname, provider, target string) string {
				return cluster + "/" + alertname + "/" + provider + "/" + target
			}

			t.Run("all 20 targets down", func(t *testing.T) {
				alerts := []promstack.PostableAlert{providerDown("a", "kvm-lab")}
				for i := 1; i <= 20; i++ {
					alerts = append(alerts, targetDown("a", "kvm-lab", i))
				}
				check(t, []string{"kvm-lab"}, alerts, want{
					notified:   []string{k("a", "ProviderHealthProviderDown", "kvm-lab", "")},
					suppressed: 20,
				})
			})
			t.Run("1 of 20 targets down", func(t *testing.T) {
				check(t, []string{"kvm-edge"}, []promstack.PostableAlert{targetDown("a", "kvm-edge", 7)}, want{
					notified: []string{k("a", "ProviderHealthTargetDown", "kvm-edge", "host-07")},
				})
			})
			t.Run("another provider's target is not muted", func(t *testing.T) {
				check(t, []string{"gcp-prod", "gcp-dev"}, []promstack.PostableAlert{providerDown("a", "gcp-prod"), targetDown("a", "gcp-dev", 3)}, want{
					notified: []string{k("a", "ProviderHealthProviderDown", "gcp-prod", ""), k("a", "ProviderHealthTargetDown", "gcp-dev", "host-03")},
				})
			})
			t.Run("the same provider in another cluster is not muted", func(t *testing.T) {
				check(t, []string{"cluster-main"}, []promstack.PostableAlert{providerDown("a", "cluster-main"), targetDown("b", "cluster-main", 1)}, want{
					notified: []string{k("a", "ProviderHealthProviderDown", "cluster-main", ""), k("b", "ProviderHealthTargetDown", "cluster-main", "host-01")},
				})
			})
		})
	}
}
