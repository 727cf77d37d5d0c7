package exporter

import (
	"bytes"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/fakechecks"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// hostsOf returns the hosts of the kvm provider's expanded block, as name=labels.
func hostsOf(t *testing.T, cfg *config.Config) []string {
	t.Helper()
	k := cfg.Providers[0].Block.(*kvm.Config)
	var out []string
	for _, h := range k.Hosts {
		var ls []string
		for _, name := range slices.Sorted(maps.Keys(h.Labels)) {
			ls = append(ls, name+"="+h.Labels[name])
		}
		out = append(out, h.Name+"{"+strings.Join(ls, ",")+"}")
	}
	return out
}

// TestInventoryExpand: a provider's host files are read at the first expand, read again only
// when they change, keep their last good hosts while they do not read well, and take their
// hosts with them when no pattern matches them any more.
func TestInventoryExpand(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(fakechecks.HostFilesProviders(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	in := newInventory(slog.New(slog.NewTextHandler(&logs, nil)), config.DefaultLimits)
	a := filepath.Join(dir, "inventory", "a.json")
	b := filepath.Join(dir, "inventory", "b.yml")

	exp, _ := in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Equal(got, []string{"hv-static{}"}) {
		t.Fatalf("no files yet: hosts %v", got)
	}
	if got := hostsOf(t, cfg); !slices.Equal(got, []string{"hv-static{}"}) {
		t.Fatalf("expand changed the loaded config: %v", got)
	}

	testutil.ReplaceFile(t, a, `[{"targets": ["127.0.0.2:1", "127.0.0.3:1"], "labels": {"rack": "r1"}}]`)
	testutil.ReplaceFile(t, b, "- targets: ['127.0.0.4:1']\n  labels: {rack: r2, maintenance: 'true'}\n- targets: ['127.0.0.2:1', '127.0.0.1:1']\n")
	exp, warnings := in.expand(cfg)
	want := []string{"hv-static{}", "127.0.0.2:1{rack=r1}", "127.0.0.3:1{rack=r1}", "127.0.0.4:1{maintenance=true,rack=r2}"}
	if got := hostsOf(t, exp); !slices.Equal(got, want) {
		t.Fatalf("hosts %v, want %v", got, want)
	}
	// b's second group repeats a host of a.json and the address of hv-static: both left out,
	// each said once with its file and line.
	if len(warnings) != 2 || !strings.Contains(warnings[0], b+":3: host \"127.0.0.2:1\" is already listed in "+a) ||
		!strings.Contains(warnings[1], b+":3: host \"127.0.0.1:1\" is already listed in hosts") {
		t.Errorf("warnings %q", warnings)
	}
	if _, again := in.expand(cfg); again != nil {
		t.Errorf("unchanged files warned again: %q", again)
	}
	// The provider's labels stay the provider's; the files' groups are the hosts' own.
	labels := (entry{provider: exp.Providers[0]}).labels()
	if labels.Provider["site"] != "fra1" || labels.Targets["127.0.0.4:1"]["maintenance"] != "true" {
		t.Errorf("labels %+v", labels)
	}

	// A file that becomes invalid keeps its last good hosts; the problem is kept with its
	// position, exported as 0 and logged once.
	testutil.ReplaceFile(t, a, `[{"targets": ["127.0.0.2:1"], "labels": {"__rack": "r1"}}]`)
	for range 3 {
		exp, _ = in.expand(cfg)
	}
	if got := hostsOf(t, exp); !slices.Equal(got, want) {
		t.Errorf("invalid a.json: hosts %v, want the last good %v", got, want)
	}
	ps := in.problems()
	if len(ps) != 1 || ps[0].Path != a || ps[0].Kept != 2 ||
		!slices.Equal(ps[0].lines(), []string{a + `:1:42: [0].labels.__rack: invalid label name "__rack": names starting with __ are reserved for Prometheus`}) {
		t.Errorf("problems %+v", ps)
	}
	if n := strings.Count(logs.String(), "host file does not read well"); n != 1 {
		t.Errorf("the problem was logged %d times, want once:\n%s", n, logs.String())
	}
	gauges := inventoryGauges(t, in)
	if gauges["last_read_successful "+a] != 0 || gauges["last_read_successful "+b] != 1 ||
		gauges["targets "+a] != 2 || gauges["targets "+b] != 3 {
		t.Errorf("gauges %v", gauges)
	}

	// An unreadable file too; fixed, it is read at once and its problem goes.
	if err := os.Chmod(a, 0); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 { // root reads it anyway
		if exp, _ = in.expand(cfg); !slices.Equal(hostsOf(t, exp), want) || len(in.problems()) != 1 {
			t.Errorf("unreadable a.json: hosts %v, problems %+v", hostsOf(t, exp), in.problems())
		}
	}
	testutil.ReplaceFile(t, a, `[{"targets": ["127.0.0.5:1"]}]`)
	exp, _ = in.expand(cfg)
	want = []string{"hv-static{}", "127.0.0.5:1{}", "127.0.0.4:1{maintenance=true,rack=r2}", "127.0.0.2:1{}"}
	if got := hostsOf(t, exp); !slices.Equal(got, want) {
		t.Errorf("fixed a.json: hosts %v, want %v", got, want)
	}
	if ps := in.problems(); len(ps) != 0 {
		t.Errorf("problems after the fix: %+v", ps)
	}

	// Removed: its hosts and its series leave.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	exp, _ = in.expand(cfg)
	// 127.0.0.2:1 is b.yml's now; 127.0.0.1:1 stays hv-static's.
	want = []string{"hv-static{}", "127.0.0.4:1{maintenance=true,rack=r2}", "127.0.0.2:1{}"}
	if got := hostsOf(t, exp); !slices.Equal(got, want) {
		t.Errorf("a.json removed: hosts %v, want %v", got, want)
	}
	if g := inventoryGauges(t, in); len(g) != 2 {
		t.Errorf("a.json removed: series %v, want only b.yml's", g)
	}
}

// TestInventoryExpandInvalidAtStart: a file invalid from the start contributes no hosts, and
// never fails the load.
func TestInventoryExpandInvalidAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(fakechecks.HostFilesProviders(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	testutil.ReplaceFile(t, filepath.Join(dir, "inventory", "a.json"), `[{"targets": ["not an address"]}]`)
	in := newInventory(slog.New(slog.DiscardHandler), config.DefaultLimits)
	exp, _ := in.expand(cfg)
	if got := hostsOf(t, exp); !slices.Equal(got, []string{"hv-static{}"}) {
		t.Errorf("hosts %v", got)
	}
	if ps := in.problems(); len(ps) != 1 || ps[0].Kept != 0 || !strings.Contains(ps[0].lines()[0], `a.json:1:15: [0].targets[0]: invalid address "not an address"`) {
		t.Errorf("problems %+v", ps)
	}
}

func inventoryGauges(t *testing.T, in *inventory) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(in)
	out := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		name := strings.TrimPrefix(mf.GetName(), checks.MetricNamespace+"_host_file_")
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "file" {
					out[name+" "+l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestRefreshInventory: the exporter applies a changed host file before the next round, with
// no reload: the runner's snapshot lists the new hosts (not checked yet) and no longer the
// removed ones, the kvm checker is retargeted (its pool shared), and a change of labels alone
// keeps the checker.
func TestRefreshInventory(t *testing.T) {
	dir := t.TempDir()
	path := fakechecks.HostFilesProviders(t, dir)
	inv := filepath.Join(dir, "inventory", "a.json")
	testutil.ReplaceFile(t, inv, `[{"targets": ["127.0.0.2:1"]}]`)
	var logs bytes.Buffer
	e, err := New(path, time.Minute, 15*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	listed := func() []string {
		var out []string
		for _, p := range e.runner.Current().Providers {
			for _, u := range p.Unchecked {
				out = append(out, u.Target)
			}
		}
		return out
	}
	if got := listed(); !slices.Equal(got, []string{"hv-static", "127.0.0.2:1"}) {
		t.Fatalf("at start: %v", got)
	}
	before := e.entries["kvm-inv"].checker

	e.refreshInventory()
	if e.entries["kvm-inv"].checker != before {
		t.Error("a refresh with nothing changed replaced the checker")
	}

	testutil.ReplaceFile(t, inv, `[{"targets": ["127.0.0.3:1"], "labels": {"rack": "r9"}}]`)
	e.refreshInventory()
	if got := listed(); !slices.Equal(got, []string{"hv-static", "127.0.0.3:1"}) {
		t.Errorf("after the change: %v", got)
	}
	after := e.entries["kvm-inv"].checker
	if after == before {
		t.Fatal("the changed host list kept the old checker")
	}
	if !strings.Contains(logs.String(), "host files changed") || !strings.Contains(logs.String(), "changed=1") {
		t.Errorf("log:\n%s", logs.String())
	}
	if got := e.runner.Current().Providers[0].Labels.Of("127.0.0.3:1"); got["rack"] != "r9" || got["site"] != "fra1" {
		t.Errorf("labels of the new host %v", got)
	}

	testutil.ReplaceFile(t, inv, `[{"targets": ["127.0.0.3:1"], "labels": {"rack": "r9", "maintenance": "true"}}]`)
	e.refreshInventory()
	if e.entries["kvm-inv"].checker != after {
		t.Error("a change of labels alone replaced the checker")
	}
	if got := e.runner.Current().Providers[0].Labels.Of("127.0.0.3:1"); got["maintenance"] != "true" {
		t.Errorf("labels after the maintenance label: %v", got)
	}

	// The providers file changed on disk but was not reloaded: a refresh keeps the loaded one.
	testutil.ReplaceFile(t, path, "providers: []\n")
	testutil.ReplaceFile(t, inv, `[{"targets": ["127.0.0.4:1"]}]`)
	e.refreshInventory()
	if got := listed(); !slices.Equal(got, []string{"hv-static", "127.0.0.4:1"}) {
		t.Errorf("after a change beside an unreloaded providers file: %v", got)
	}
}
