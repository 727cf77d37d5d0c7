package testenv_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// shortChildEnv selects what TestShortSkipsEvenUnderRequireIntegration does when this test
// binary re-runs itself as its child.
const shortChildEnv = "PHE_TESTENV_SHORT_CHILD"

// TestShortSkipsEvenUnderRequireIntegration runs SkipIfShort and Unavailable in a child test
// process, with and without -short and REQUIRE_INTEGRATION=1: under -short both skip, whatever
// REQUIRE_INTEGRATION says (make test-unit needs no real system); without -short SkipIfShort lets
// the test run and Unavailable keeps its meaning (skip, or fail under REQUIRE_INTEGRATION=1).
func TestShortSkipsEvenUnderRequireIntegration(t *testing.T) {
	switch os.Getenv(shortChildEnv) {
	case "":
	case "skip-if-short":
		testenv.SkipIfShort(t, "starts a real thing")
		t.Log("CHILD RAN ON")
		return
	case "unavailable":
		testenv.Unavailable(t, "the thing is not installed")
		t.Log("CHILD RAN ON")
		return
	default:
		t.Fatalf("unknown %s=%q", shortChildEnv, os.Getenv(shortChildEnv))
	}
	for _, c := range []struct {
		mode, require string
		short         bool
		want          string // "SKIP", "PASS" or "FAIL"
		wantOut       string
	}{
		{"skip-if-short", "1", true, "SKIP", "skipped: starts a real thing (-short)"},
		{"skip-if-short", "", true, "SKIP", "skipped: starts a real thing (-short)"},
		{"skip-if-short", "1", false, "PASS", "CHILD RAN ON"},
		{"unavailable", "1", true, "SKIP", "skipped: the thing is not installed"},
		{"unavailable", "", false, "SKIP", "skipped: the thing is not installed"},
		{"unavailable", "1", false, "FAIL", "REQUIRE_INTEGRATION=1 and a part of the test environment is missing: the thing is not installed"},
	} {
		args := []string{"-test.run=^TestShortSkipsEvenUnderRequireIntegration$", "-test.v"}
		if c.short {
			args = append(args, "-test.short")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = testenv.ChildEnv(t.TempDir(), shortChildEnv+"="+c.mode, "REQUIRE_INTEGRATION="+c.require)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("run the child: %v", err)
		}
		what := c.mode + ", REQUIRE_INTEGRATION=" + c.require
		if c.short {
			what += ", -short"
		}
		if failed := err != nil; failed != (c.want == "FAIL") {
			t.Errorf("%s: the child exited with %v, want it to %s:\n%s", what, err, strings.ToLower(c.want), out)
		}
		if !strings.Contains(string(out), "--- "+c.want+": TestShortSkipsEvenUnderRequireIntegration") ||
			!strings.Contains(string(out), c.wantOut) {
			t.Errorf("%s: want --- %s with %q, got:\n%s", what, c.want, c.wantOut, out)
		}
		if c.want == "SKIP" && strings.Contains(string(out), "CHILD RAN ON") {
			t.Errorf("%s: the child went on after the skip:\n%s", what, out)
		}
	}
}
