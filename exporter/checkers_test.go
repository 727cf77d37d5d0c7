package exporter

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	// The provider types of this build, as the command has them.
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

func gcpProvider(name, project, filter string) config.Provider {
	return config.Provider{Name: name, Type: "gcp", Block: &gcp.Config{Project: project, Filter: filter}}
}

// TestBuildCheckers: a reload keeps the checker of an unchanged provider, builds changed and
// added ones, and retires (for closing) exactly the removed and changed ones.
func TestBuildCheckers(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	logger := slog.New(slog.DiscardHandler)

	first, err := buildCheckers(&config.Config{Providers: []config.Provider{
		gcpProvider("keep", "keep-project", "k1"),
		gcpProvider("change", "change-project", "c1"),
		gcpProvider("remove", "remove-project", "r1"),
	}}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	if first.added != 3 || len(first.retired) != 0 || len(first.checkers) != 3 {
		t.Fatalf("first build: added %d, retired %d, checkers %d; want 3, 0, 3", first.added, len(first.retired), len(first.checkers))
	}

	second, err := buildCheckers(&config.Config{Providers: []config.Provider{
		gcpProvider("add", "add-project", "a1"),
		gcpProvider("change", "change-project", "c1,c2"),
		gcpProvider("keep", "keep-project", "k1"),
	}}, first.entries, logger)
	if err != nil {
		t.Fatal(err)
	}
	if second.entries["keep"].checker != first.entries["keep"].checker {
		t.Errorf("the unchanged provider got a new checker")
	}
	if second.entries["change"].checker == first.entries["change"].checker {
		t.Errorf("the changed provider kept its old checker")
	}
	var names []string
	for _, c := range second.checkers {
		names = append(names, c.Name())
	}
	if got := strings.Join(names, ","); got != "add,change,keep" {
		t.Errorf("checkers in order %s, want the file's order add,change,keep", got)
	}
	retired := map[string]bool{}
	for _, c := range second.retired {
		retired[c.(checks.Checker).Name()] = true
	}
	if len(second.retired) != 2 || !retired["change"] || !retired["remove"] {
		t.Errorf("retired %v, want the old change and remove checkers", retired)
	}
	for _, c := range second.retired {
		if c.(checks.Checker) == second.entries["change"].checker {
			t.Errorf("the new checker of the changed provider is among the retired ones")
		}
	}
	if second.added != 1 || second.changed != 1 || second.kept != 1 || second.removed != 1 {
		t.Errorf("added %d changed %d kept %d removed %d, want 1 each", second.added, second.changed, second.kept, second.removed)
	}
	if n := f.Built("keep"); n != 1 {
		t.Errorf("keep built %d times, want 1", n)
	}
}

// TestBuildCheckersFailure: one provider that cannot be built fails the whole build, reports
// every failing provider, and closes what was built on the way; the old checkers stay open.
func TestBuildCheckersFailure(t *testing.T) {
	f := fakechecks.New()
	f.Use(t)
	fakechecks.WithoutType(t, kvm.Type)
	logger := slog.New(slog.DiscardHandler)
	old, err := buildCheckers(&config.Config{Providers: []config.Provider{gcpProvider("old", "old-project", "o1")}}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}

	_, err = buildCheckers(&config.Config{Providers: []config.Provider{
		gcpProvider("fresh", "fresh-project", "f1"),
		gcpProvider("broken", "fail-to-build", "b1"),
		{Name: "lab", Type: "kvm", Block: &kvm.Config{User: "root"}},
	}}, old.entries, logger)
	want := "provider broken: cannot build this one\nprovider lab: checks of type kvm are not available in this build"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want:\n%s", err, want)
	}
	if n := f.Closed("fresh"); n != 1 {
		t.Errorf("the checker built before the failure was closed %d times, want 1", n)
	}
	if n := f.Closed("old"); n != 0 {
		t.Errorf("the running checker was closed %d times by a failed build, want 0", n)
	}
}

// TestBuildCheckersRebuildsStale: a provider whose block is unchanged keeps its checker, unless
// the checker reports itself stale (here: a kubernetes checker whose kubeconfig was missing at
// load, then written). A reload then builds it again, so the fixed file is read.
func TestBuildCheckersRebuildsStale(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := &config.Config{Providers: []config.Provider{{
		Name: "cluster", Type: "kubernetes",
		Block: &kubernetes.Config{Kubeconfig: kubeconfig, Version: "v1", Resource: "pods"},
	}}}

	first, err := buildCheckers(cfg, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	second, err := buildCheckers(cfg, first.entries, logger)
	if err != nil {
		t.Fatal(err)
	}
	if second.entries["cluster"].checker == first.entries["cluster"].checker {
		t.Fatalf("a checker whose kubeconfig was missing was kept on reload; want it rebuilt")
	}
	if len(second.retired) != 1 {
		t.Errorf("retired %d checkers, want the stale one", len(second.retired))
	}

	const valid = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: "not-a-secret"}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`
	if err := os.WriteFile(kubeconfig, []byte(valid), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := buildCheckers(cfg, second.entries, logger)
	if err != nil {
		t.Fatal(err)
	}
	if got := third.entries["cluster"].checker.Targets(); len(got) != 1 || got[0] != "ctx" {
		t.Errorf("targets after the kubeconfig was written: %v, want [ctx] (the file was not re-read)", got)
	}
	fourth, err := buildCheckers(cfg, third.entries, logger)
	if err != nil {
		t.Fatal(err)
	}
	if fourth.entries["cluster"].checker != third.entries["cluster"].checker {
		t.Errorf("a healthy, unchanged checker was rebuilt on reload; want it kept")
	}
	for _, s := range []*checkerSet{first, second, third} {
		for _, c := range s.allClosers() {
			c.Close()
		}
	}
}
