package checkertest_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// deafType is tcp with the bug the kit's Deadline subtest is there to catch: its check keeps a
// bound of its own instead of the round's deadline, as a dial timeout not tied to the context
// does. Close still cuts it.
const deafType checks.ProviderType = "tcp-deaf"

// deafBound is the deaf check's own bound: past the kit's 300ms deadline and its 5s grace.
const deafBound = 8 * time.Second

func init() {
	checks.Register(checks.Type{
		Name:    deafType,
		Reasons: tcpReasons,
		Block:   config.BlockType{Fields: config.YAMLKeys[tcpConfig](), Decode: decodeTCP},
		New: func(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
			c, err := newTCP(p, logger)
			if err != nil {
				return nil, err
			}
			return deaf{c.(*tcpChecker)}, nil
		},
	})
}

type deaf struct{ *tcpChecker }

func (deaf) Type() checks.ProviderType { return deafType }

func (d deaf) Check(ctx context.Context) []checks.TargetResult {
	own, cancel := context.WithTimeout(context.WithoutCancel(ctx), deafBound)
	defer cancel()
	return d.tcpChecker.Check(own)
}

// childEnv makes TestKitFailsADeafType the child that runs the kit.
const childEnv = "CHECKERTEST_DEAF_CHILD"

// TestKitFailsADeafType runs the kit against deafType and expects it to fail the Deadline
// subtest, and only that one. A kit's failure fails every test above it, so the kit runs in a
// child process (this test binary again), whose verdicts are read from its -test.v output.
func TestKitFailsADeafType(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		a := listen(t)
		checkertest.Run(t, checkertest.Harness{
			Type:    deafType,
			Block:   "addresses: [" + a + "]",
			Changed: "addresses: [" + a + ", " + listen(t) + "]",
			Targets: []string{a},
			Hung:    func(addr string) string { return "addresses: [" + addr + "]" },
			Hangs:   []checkertest.Hang{checkertest.HangSYNDropped},
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKitFailsADeafType$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the kit passed a type whose check ignores its deadline:\n%s", out)
	}
	var failed []string
	for line := range strings.Lines(string(out)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: "); ok {
			name, _, _ = strings.Cut(name, " ")
			failed = append(failed, name)
		}
	}
	slices.Sort(failed)
	want := []string{"TestKitFailsADeafType", "TestKitFailsADeafType/Deadline", "TestKitFailsADeafType/Deadline/SYNDropped"}
	if !slices.Equal(failed, want) || !strings.Contains(string(out), "Check returned") {
		t.Errorf("the kit failed %q, want %q with the Check's lateness:\n%s", failed, want, out)
	}
}
