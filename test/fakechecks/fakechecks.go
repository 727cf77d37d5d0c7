// Package fakechecks gives the tests of the exporter and of its command checkers they control:
// while a Checks is in use, the registered gcp type builds fakes instead of real gcp checkers,
// so that a providers file of `type: gcp` providers (WriteProviders) loads through the real
// loader and runs through the real runner, reloads and endpoints, without a network.
//
// A fake provider's targets are the comma-separated names in its gcp block's filter. A target
// named down-* is down (APIError, with a message holding markup, to test escaping); every other
// target is up. A provider's Check waits for its project's gate, when the test set one; a
// project named fail-to-build cannot be built. The fakes are probeable (ProbeTarget).
package fakechecks

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// SlowProbe is how long a probe of a fake target named slow-* takes: an API call to GCE or
// vSphere takes that long.
const SlowProbe = 600 * time.Millisecond

// Checks builds the fake checkers and counts what is done to them.
type Checks struct {
	mu     sync.Mutex
	built  map[string]int // constructions per provider name
	closed map[string]int // Close calls per provider name
	checks map[string]int // Check calls per provider name
	gates  map[string]chan struct{}
}

// New returns a Checks that builds nothing until it is used (Use, Install).
func New() *Checks {
	return &Checks{
		built:  map[string]int{},
		closed: map[string]int{},
		checks: map[string]int{},
		gates:  map[string]chan struct{}{},
	}
}

// Use makes f the constructor of gcp providers for the duration of the test. Call it before the
// exporter starts: the exporter must have stopped when the test's cleanups restore the real one.
func (f *Checks) Use(t testing.TB) {
	t.Helper()
	restore := swap(gcp.Type, f.constructor)
	t.Cleanup(restore)
}

// Install makes f the constructor of gcp providers for good: for a test binary that runs the
// exporter's main in a child process.
func (f *Checks) Install() { swap(gcp.Type, f.constructor) }

// WithoutType makes the exporter a build without provider type typ for the duration of the
// test: building a checker of that type fails as it would then.
func WithoutType(t testing.TB, typ checks.ProviderType) {
	t.Helper()
	restore := swap(typ, func(p config.Provider, _ *slog.Logger) (checks.Checker, error) {
		// The exporter's own error for a type this build lacks.
		return nil, fmt.Errorf("checks of type %s are not available in this build", p.Type)
	})
	t.Cleanup(restore)
}

// Replace makes build the constructor of the registered type typ for the duration of the
// test, as Use does for the fakes of this package.
func Replace(t testing.TB, typ checks.ProviderType, build func(config.Provider, *slog.Logger) (checks.Checker, error)) {
	t.Helper()
	t.Cleanup(swap(typ, build))
}

// swap replaces the constructor of the registered type typ and returns what puts it back.
func swap(typ checks.ProviderType, build func(config.Provider, *slog.Logger) (checks.Checker, error)) (restore func()) {
	rt, ok := checks.Lookup(typ)
	if !ok {
		panic(fmt.Sprintf("fakechecks: provider type %s is not registered (import package providers)", typ))
	}
	prev := rt.New
	rt.New = build
	return func() { rt.New = prev }
}

// Gate makes the checks of the providers of project wait until the returned function is called.
func (f *Checks) Gate(project string) (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.gates[project] = ch
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Built is how many checkers were built for the provider.
func (f *Checks) Built(name string) int { return f.count(f.built, name) }

// Closed is how many times the provider's checkers were closed.
func (f *Checks) Closed(name string) int { return f.count(f.closed, name) }

// Checked is how many times the provider's checkers were called to check.
func (f *Checks) Checked(name string) int { return f.count(f.checks, name) }

func (f *Checks) count(m map[string]int, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[name]
}

func (f *Checks) constructor(p config.Provider, _ *slog.Logger) (checks.Checker, error) {
	g, ok := p.Block.(*gcp.Config)
	if !ok {
		return nil, fmt.Errorf("no gcp block")
	}
	if g.Project == "fail-to-build" {
		return nil, fmt.Errorf("cannot build this one")
	}
	f.mu.Lock()
	f.built[p.Name]++
	f.mu.Unlock()
	return &checker{f: f, name: p.Name, project: g.Project, targets: strings.Split(g.Filter, ",")}, nil
}

type checker struct {
	f       *Checks
	name    string
	project string
	targets []string
}

func (c *checker) Name() string              { return c.name }
func (c *checker) Type() checks.ProviderType { return gcp.Type }
func (c *checker) Targets() []string         { return c.targets }

func (c *checker) Check(ctx context.Context) []checks.TargetResult {
	c.f.mu.Lock()
	c.f.checks[c.name]++
	gate := c.f.gates[c.project]
	c.f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	var rs []checks.TargetResult
	for _, t := range c.targets {
		r := checks.TargetResult{Target: t, Up: true, Reason: checks.ReasonReady, Duration: time.Millisecond}
		if strings.HasPrefix(t, "down-") {
			r.Up, r.Reason, r.Message = false, checks.ReasonAPIError, "<b>boom</b> from "+t
		}
		if ctx.Err() != nil {
			r.Up, r.Reason, r.Message = false, checks.ReasonTimeout, "deadline"
		}
		rs = append(rs, r)
	}
	return rs
}

func (c *checker) Close() error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.closed[c.name]++
	return nil
}

// ProbeTarget makes the fake checkers probeable: one Check, the target's verdict. A target
// named busy-* is busy, as a KVM host whose round's check held it past the deadline; a target
// named slow-* answers after SlowProbe (Timeout when ctx ends first).
func (c *checker) ProbeTarget(ctx context.Context, target string, trace *checks.Trace) (checks.TargetResult, error) {
	if strings.HasPrefix(target, "busy-") {
		return checks.TargetResult{Target: target, Reason: checks.ReasonTimeout, Message: "waiting for the running check to finish",
			NotContacted: true}, checks.ErrBusy
	}
	end := trace.Begin("fake check")
	if strings.HasPrefix(target, "slow-") {
		select {
		case <-time.After(SlowProbe):
		case <-ctx.Done():
			end("deadline")
			return checks.TargetResult{Target: target, Reason: checks.ReasonTimeout, Message: "no answer before the deadline"}, nil
		}
	}
	for _, r := range c.Check(ctx) {
		if r.Target == target {
			end(string(r.Reason))
			return r, nil
		}
	}
	end("unknown target")
	return checks.TargetResult{}, checks.ErrUnknownTarget
}

// Provider is one `type: gcp` entry of a providers file written by a test: its name, project and
// targets (comma-separated).
type Provider struct{ Name, Project, Targets string }

// WriteProviders writes a providers file of gcp providers to path (a new file in the test's
// temporary directory when path is empty) and returns its path.
func WriteProviders(t testing.TB, path string, ps ...Provider) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "  - name: %s\n    type: gcp\n    gcp:\n      project: %s\n      filter: %q\n", p.Name, p.Project, p.Targets)
	}
	if len(ps) == 0 {
		b.Reset()
		b.WriteString("providers: []\n")
	}
	return WriteFile(t, path, b.String())
}

// WriteFile writes the providers file text to path, or to a new file in the test's temporary
// directory when path is empty, and returns its path.
func WriteFile(t testing.TB, path, text string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "providers.yml")
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ClosedPortKVM is a providers file of one kvm provider "lab" with one host, hv1, on a closed
// port and with a key file that does not exist (its checks read KeyMaterialError), whose labels
// are hostLabels (a YAML flow mapping).
func ClosedPortKVM(hostLabels string) string {
	return `providers:
- name: lab
  type: kvm
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hosts: [{address: "127.0.0.1:1", name: hv1, labels: ` + hostLabels + `}]
`
}

// HostFilesProviders writes a providers file with one kvm provider (kvm-inv, its own host
// hv-static, labels site=fra1) whose hostFiles are inventory/*.json and inventory/*.yml beside
// it, and returns the file's path.
func HostFilesProviders(t testing.TB, dir string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "inventory"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "providers.yml")
	testutil.ReplaceFile(t, path, `providers:
- name: kvm-inv
  type: kvm
  labels: {site: fra1}
  kvm:
    user: phe
    privateKeyFile: /nonexistent/key
    insecureSkipHostKeyVerification: true
    storagePool: default
    hosts: [{address: "127.0.0.1:1", name: hv-static}]
    hostFiles: [inventory/*.json, inventory/*.yml]
`)
	return path
}
