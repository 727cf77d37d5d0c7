package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

func gcpProvider(name, project, filter string) config.Provider {
	return config.Provider{Name: name, Type: config.TypeGCP, GCP: &config.GCPConfig{Project: project, Filter: filter}}
}

// TestBuildCheckers: a reload keeps the checker of an unchanged provider, builds changed and
// added ones, and retires (for closing) exactly the removed and changed ones.
func TestBuildCheckers(t *testing.T) {
	f := newFakeChecks()
	f.use(t)
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
	if n := f.count(f.built, "keep"); n != 1 {
		t.Errorf("keep built %d times, want 1", n)
	}
}

// TestBuildCheckersFailure: one provider that cannot be built fails the whole build, reports
// every failing provider, and closes what was built on the way; the old checkers stay open.
func TestBuildCheckersFailure(t *testing.T) {
	f := newFakeChecks()
	f.use(t)
	if prev, ok := newChecker[checks.TypeKVM]; ok {
		delete(newChecker, checks.TypeKVM)
		t.Cleanup(func() { newChecker[checks.TypeKVM] = prev })
	}
	logger := slog.New(slog.DiscardHandler)
	old, err := buildCheckers(&config.Config{Providers: []config.Provider{gcpProvider("old", "old-project", "o1")}}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}

	_, err = buildCheckers(&config.Config{Providers: []config.Provider{
		gcpProvider("fresh", "fresh-project", "f1"),
		gcpProvider("broken", "fail-to-build", "b1"),
		{Name: "lab", Type: config.TypeKVM, KVM: &config.KVMConfig{User: "root"}},
	}}, old.entries, logger)
	want := "provider broken: cannot build this one\nprovider lab: checks of type kvm are not available in this build"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want:\n%s", err, want)
	}
	if n := f.count(f.closed, "fresh"); n != 1 {
		t.Errorf("the checker built before the failure was closed %d times, want 1", n)
	}
	if n := f.count(f.closed, "old"); n != 0 {
		t.Errorf("the running checker was closed %d times by a failed build, want 0", n)
	}
}
