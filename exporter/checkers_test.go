package exporter

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/internal/testutil"
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

// TestReloadKeepsUnchangedHostsLinks, on real hosts: editing a kvm provider's host list keeps
// the links of the hosts in both lists (no new SSH login on them, counted by their sshd),
// closes the removed host's link, and dials only the added host. A reload that fails leaves the
// running checker's links alone.
func TestReloadKeepsUnchangedHostsLinks(t *testing.T) {
	fleet := kvmhost.Start(t, 3)
	logger := slog.New(slog.DiscardHandler)
	kvmProvider := func(hosts ...*kvmhost.Host) config.Provider {
		k := kvmBlock(fleet.KVMConfig())
		k.Hosts = nil
		for _, h := range hosts {
			k.Hosts = append(k.Hosts, kvm.Host{Address: h.Addr, Name: h.Name})
		}
		return config.Provider{Name: "kvm-lab", Type: "kvm", Block: &k}
	}
	check := func(c checks.Checker) map[string]checks.TargetResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out := map[string]checks.TargetResult{}
		for _, r := range c.Check(ctx) {
			if r.Reason != checks.ReasonReady {
				t.Errorf("%s: %s (%q), want Ready", r.Target, r.Reason, r.Message)
			}
			out[r.Target] = r
		}
		return out
	}
	h0, h1, h2 := fleet.Hosts[0], fleet.Hosts[1], fleet.Hosts[2]

	first, err := buildCheckers(&config.Config{Providers: []config.Provider{kvmProvider(h0, h1)}}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(first.allClosers(), logger) })
	check(first.checkers[0])
	if h0.Logins() != 1 || h1.Logins() != 1 {
		t.Fatalf("logins %d, %d after the first round, want 1 each", h0.Logins(), h1.Logins())
	}

	// A reload that fails (another provider is invalid) changes nothing.
	bad := config.Provider{Name: "broken", Type: "vmware"}
	if _, err := buildCheckers(&config.Config{Providers: []config.Provider{kvmProvider(h1, h2), bad}}, first.entries, logger); err == nil {
		t.Fatal("a build with an unknown provider type succeeded")
	}
	check(first.checkers[0])
	if h0.Logins() != 1 || h1.Logins() != 1 || h0.TCPConnections() != 1 || h1.TCPConnections() != 1 {
		t.Fatalf("after a failed reload: logins %d, %d, connections %d, %d; want 1 each (links untouched)",
			h0.Logins(), h1.Logins(), h0.TCPConnections(), h1.TCPConnections())
	}

	// kvm-0 removed, kvm-2 added, kvm-1 kept.
	second, err := buildCheckers(&config.Config{Providers: []config.Provider{kvmProvider(h1, h2)}}, first.entries, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(second.allClosers(), logger) })
	if second.changed != 1 || len(second.retired) != 1 {
		t.Fatalf("changed %d, retired %d; want the provider changed and its old checker retired", second.changed, len(second.retired))
	}
	closeAll(second.retired, logger)
	rs := check(second.checkers[0])
	if _, ok := rs[h0.Name]; ok || len(rs) != 2 {
		t.Errorf("verdicts for %v, want kvm-1 and kvm-2 only", rs)
	}
	if n := h1.Logins(); n != 1 {
		t.Errorf("kept host %s: %d logins, want 1: 0 new handshakes after the reload", h1.Name, n)
	}
	if n := h2.Logins(); n != 1 {
		t.Errorf("added host %s: %d logins, want 1", h2.Name, n)
	}
	testutil.Eventually(t, 10*time.Second, "the removed host's link to close", func() bool { return h0.TCPConnections() == 0 })
	if n := h1.TCPConnections(); n != 1 {
		t.Errorf("kept host %s: %d TCP connections, want its 1 link", h1.Name, n)
	}
}

// kvmBlock is a test fleet as a kvm block, with the loader's defaults.
func kvmBlock(b testenv.KVMBlock) kvm.Config {
	k := kvm.Config{User: b.User, PrivateKeyFile: b.PrivateKeyFile, KnownHostsFile: b.KnownHostsFile,
		Port: kvm.DefaultPort, Socket: b.Socket, StoragePool: b.StoragePool, Concurrency: kvm.DefaultConcurrency,
		TCPTimeout: kvm.DefaultTCPTimeout, SSHTimeout: kvm.DefaultSSHTimeout, LibvirtTimeout: kvm.DefaultLibvirtTimeout,
		RPCTimeout: kvm.DefaultRPCTimeout}
	for _, h := range b.Hosts {
		k.Hosts = append(k.Hosts, kvm.Host{Address: h.Address, Name: h.Name})
	}
	return k
}
