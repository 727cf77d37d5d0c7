package checkertest_test

// The provider type tcp, registered only in this test binary: a provider is a list of
// addresses, and a target is Ready when a TCP connect to it succeeds. It is the smallest type
// the exporter could have, written as a model of one: the registration with its catalogue, the
// block and its decoder, the constructor, the checker, and the conformance kit run against real
// local listeners. It uses only what a type's author has: the packages checks, config and
// checkertest.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// tcpType is the providers file's `type: tcp`, and its block's key.
const tcpType checks.ProviderType = "tcp"

// reasonTCPUnreachable is the type's own reason; Ready and Timeout are every type's.
const reasonTCPUnreachable checks.Reason = "TCPUnreachable"

func init() {
	checks.Register(checks.Type{
		Name:    tcpType,
		Reasons: tcpReasons,
		Block:   config.BlockType{Fields: config.YAMLKeys[tcpConfig](), Decode: decodeTCP},
		New:     newTCP,
	})
}

// tcpReasons is the type's catalogue.
var tcpReasons = []checks.ReasonInfo{
	{Reason: checks.ReasonReady, Meaning: "A TCP connection to the address was established (and closed at once)."},
	{Reason: checks.ReasonTimeout, Meaning: "The connect did not complete before the round's deadline (no answer to its SYNs), or the checker was closed during it."},
	{Reason: reasonTCPUnreachable, Meaning: "The connect failed: refused, no route to the host, or its name did not resolve."},
}

// tcpConfig is the block of a `type: tcp` provider:
//
//	tcp:
//	  addresses: ["db-1.example.net:5432", "[fd00::7]:5432"]
type tcpConfig struct {
	// Addresses are the targets, host:port each, in the file's order.
	Addresses []string `yaml:"addresses"`
}

// Equal reports whether o is the same block: a reload keeps the checker of an Equal block.
func (c *tcpConfig) Equal(o config.Block) bool {
	oc, ok := o.(*tcpConfig)
	return ok && slices.Equal(c.Addresses, oc.Addresses)
}

// Files: a tcp block names no file.
func (c *tcpConfig) Files() []config.File { return nil }

// Warnings: nothing in a tcp block weakens security.
func (c *tcpConfig) Warnings(string) []string { return nil }

// decodeTCP reads a tcp block. Each address names its target, so it must fit the target names
// the ProviderHealth object carries; every problem is placed at its value by the reader.
func decodeTCP(f *config.Fields) config.Block {
	before := f.Problems()
	c := &tcpConfig{Addresses: f.Addresses("addresses", 0, config.TargetNameProblem)}
	if len(c.Addresses) == 0 && f.Problems() == before {
		f.Errorf(f.Key("addresses"), "addresses", "must list at least one address (host:port)")
	}
	return c
}

// tcpChecker checks one tcp provider. It holds no connection between checks; Close cuts the
// checks in progress.
type tcpChecker struct {
	name    string
	targets []string
	logger  *slog.Logger
	closing checks.Closing
}

// newTCP is the registered constructor: it contacts nothing.
func newTCP(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	c, ok := p.Block.(*tcpConfig)
	if !ok {
		return nil, fmt.Errorf("provider %q: type tcp needs a tcp block", p.Name)
	}
	return &tcpChecker{name: p.Name, targets: c.Addresses, logger: logger}, nil
}

func (c *tcpChecker) Name() string              { return c.name }
func (c *tcpChecker) Type() checks.ProviderType { return tcpType }
func (c *tcpChecker) Targets() []string         { return c.targets }

// Close cuts every check in progress, without waiting for it. It is idempotent.
func (c *tcpChecker) Close() error {
	c.closing.Close()
	return nil
}

// Check connects to every address at once, each connect bounded by ctx (the round's deadline)
// and by Close.
func (c *tcpChecker) Check(ctx context.Context) []checks.TargetResult {
	ctx, stop := c.closing.Scope(ctx)
	defer stop()
	results := make([]checks.TargetResult, len(c.targets))
	var wg sync.WaitGroup
	for i, addr := range c.targets {
		wg.Go(func() { results[i] = c.connect(ctx, addr) })
	}
	wg.Wait()
	return results
}

// connect checks one address.
func (c *tcpChecker) connect(ctx context.Context, addr string) checks.TargetResult {
	start := time.Now()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	res := checks.TargetResult{Target: addr, Duration: time.Since(start), CheckedAt: time.Now()}
	switch {
	case err == nil:
		conn.Close()
		res.Up, res.Reason, res.Message = true, checks.ReasonReady, "connected to "+addr
	case ctx.Err() != nil:
		res.Reason, res.Message = checks.ReasonTimeout, fmt.Sprintf("connect to %s: %v", addr, context.Cause(ctx))
	default:
		res.Reason, res.Message = reasonTCPUnreachable, err.Error()
	}
	c.logger.Debug("target checked", "target", addr, "reason", res.Reason, "duration", res.Duration)
	return res
}

// TestTCPConformance runs the kit against two real listeners. A listener that accepts is a
// healthy server to a check that only connects, so the hung endpoint is the one whose SYNs are
// dropped; the type has no credentials.
func TestTCPConformance(t *testing.T) {
	a, b := listen(t), listen(t)
	checkertest.Run(t, checkertest.Harness{
		Type:    tcpType,
		Block:   "addresses: [" + a + ", " + b + "]",
		Changed: "addresses: [" + a + "]",
		Targets: []string{a, b},
		Hung:    func(addr string) string { return "addresses: [" + addr + "]" },
		Hangs:   []checkertest.Hang{checkertest.HangSYNDropped},
	})
}

// listen starts a TCP listener on loopback and returns its host:port; it closes with the test.
// The kernel completes a connect to it without the test accepting: all a connect sees.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestTCPBlockProblems: every problem of a tcp block is placed at its value, in the loader's
// form (file:line:col: field: what is wrong and what is allowed).
func TestTCPBlockProblems(t *testing.T) {
	file := "providers:\n" +
		"  - {name: a, type: tcp, tcp: {addresses: ['db-1:5432', db-1, 'DB-1:5432']}}\n" +
		"  - {name: b, type: tcp, tcp: {}}\n"
	_, err := config.Parse("providers.yml", []byte(file))
	want := `providers.yml:2:57: providers[0].tcp.addresses[1]: invalid address "db-1": no port (allowed: host:port or [v6]:port)` + "\n" +
		`providers.yml:2:63: providers[0].tcp.addresses[2]: duplicate address "DB-1:5432" (first listed at line 2)` + "\n" +
		`providers.yml:3:26: providers[1].tcp.addresses: must list at least one address (host:port)`
	if err == nil || err.Error() != want {
		t.Errorf("errors:\n%v\nwant:\n%s", err, want)
	}
}
