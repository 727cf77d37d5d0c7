package promstack

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// Promtool returns the path of the Prometheus 3 promtool (PROMTOOL_BIN when set, otherwise the
// one built into bin/, building it if needed), or ends the test with testenv.Unavailable when
// this machine cannot build it.
func Promtool(tb testing.TB) string {
	tb.Helper()
	return RequireBinaries(tb).Promtool
}

// RunPromtool runs promtool with args and returns its combined output; a non-zero exit is an
// error that carries the output.
func RunPromtool(ctx context.Context, promtool string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, promtool, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	d, err := testenv.StartCommand("promtool", cmd, "")
	if err != nil {
		return "", err
	}
	<-d.Done()
	if err := d.WaitErr(); err != nil {
		return out.String(), fmt.Errorf("promtool %v: %w\n%s", args, err, out.String())
	}
	return out.String(), nil
}

// CheckRules runs `promtool check rules` on files.
func CheckRules(ctx context.Context, promtool string, files ...string) (string, error) {
	return RunPromtool(ctx, promtool, append([]string{"check", "rules"}, files...)...)
}

// TestRules runs `promtool test rules` on rule unit-test files.
func TestRules(ctx context.Context, promtool string, files ...string) (string, error) {
	return RunPromtool(ctx, promtool, append([]string{"test", "rules"}, files...)...)
}
