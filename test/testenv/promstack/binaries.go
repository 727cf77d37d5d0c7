package promstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/toolbuild"
)

// buildHint is the command that builds both toolchains beforehand.
const buildHint = "make prom-binaries"

// prometheusSpec builds Prometheus 3 and promtool from tools/prometheus into
// bin/prometheus-<module version>+<tags>/. remove_all_sd leaves out every service discovery
// but static targets, files and HTTP, which trims the build; enable_kubernetes_sd brings the
// Kubernetes one back (Options.KubernetesPods: TestChartOnNode finds the chart's pods with
// it). The version is stamped so `prometheus --version` and /api/v1/status/buildinfo say 3.x
// instead of nothing.
var prometheusSpec = toolbuild.Spec{
	Name:          "prometheus",
	ToolsDir:      "tools/prometheus",
	VersionModule: "github.com/prometheus/prometheus",
	Targets: []toolbuild.Target{
		{Pkg: "github.com/prometheus/prometheus/cmd/prometheus", File: "prometheus"},
		{Pkg: "github.com/prometheus/prometheus/cmd/promtool", File: "promtool"},
	},
	Tags:      []string{"remove_all_sd", "enable_kubernetes_sd"},
	LDFlags:   func(v string) []string { return versionFlags(prometheusRelease(v)) },
	BuildHint: buildHint,
}

// alertmanagerSpec builds Alertmanager and amtool from tools/alertmanager into
// bin/alertmanager-<version>/.
var alertmanagerSpec = toolbuild.Spec{
	Name:          "alertmanager",
	ToolsDir:      "tools/alertmanager",
	VersionModule: "github.com/prometheus/alertmanager",
	Targets: []toolbuild.Target{
		{Pkg: "github.com/prometheus/alertmanager/cmd/alertmanager", File: "alertmanager"},
		{Pkg: "github.com/prometheus/alertmanager/cmd/amtool", File: "amtool"},
	},
	LDFlags:   func(v string) []string { return versionFlags(strings.TrimPrefix(v, "v")) },
	BuildHint: buildHint,
}

func versionFlags(release string) []string {
	return []string{"-s", "-w", "-X", "github.com/prometheus/common/version.Version=" + release}
}

// prometheusRelease maps a Prometheus 3 module version to its release: the module is tagged
// v0.MMM.P for release M.MM.P (v0.316.0 is 3.16.0), since Prometheus's import path carries no
// major version. Anything else is returned without its "v".
func prometheusRelease(moduleVersion string) string {
	v := strings.TrimPrefix(moduleVersion, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) != 3 || parts[0] != "0" {
		return v
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 100 {
		return v
	}
	return fmt.Sprintf("%d.%d.%s", n/100, n%100, parts[2])
}

// Binaries are the paths of the stack's executables.
type Binaries struct {
	Prometheus, Promtool, Alertmanager, Amtool string
}

// EnsureBinaries returns the paths of Prometheus, promtool, Alertmanager and amtool, building
// them first from the tools modules when the caches under bin/ are missing or stale (the first
// Prometheus build takes several minutes on two cores; Alertmanager about one). Concurrent
// callers wait for one build; logf hears of progress. An error wrapping toolbuild.ErrNoGo or
// toolbuild.ErrNoModuleProxy means this machine cannot build them.
func EnsureBinaries(ctx context.Context, logf func(format string, args ...any)) (Binaries, error) {
	prom, err := toolbuild.Ensure(ctx, prometheusSpec, logf)
	if err != nil {
		return Binaries{}, err
	}
	am, err := toolbuild.Ensure(ctx, alertmanagerSpec, logf)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Prometheus: prom[0], Promtool: prom[1], Alertmanager: am[0], Amtool: am[1]}, nil
}

// RequireBinaries returns the stack's binaries: each from its environment variable
// (PROMETHEUS_BIN, PROMTOOL_BIN, ALERTMANAGER_BIN, AMTOOL_BIN) when set, otherwise from the build cache,
// building it if needed. It ends the test through testenv.Unavailable when this machine cannot
// build them and fails it on any other error. Under -short it skips the test: every caller runs
// one of them.
func RequireBinaries(tb testing.TB) Binaries {
	tb.Helper()
	testenv.SkipIfShort(tb, "runs Prometheus, Alertmanager or promtool (built from the Go module proxy)")
	overrides := Binaries{
		Prometheus:   os.Getenv("PROMETHEUS_BIN"),
		Promtool:     os.Getenv("PROMTOOL_BIN"),
		Alertmanager: os.Getenv("ALERTMANAGER_BIN"),
		Amtool:       os.Getenv("AMTOOL_BIN"),
	}
	for env, p := range map[string]string{"PROMETHEUS_BIN": overrides.Prometheus, "PROMTOOL_BIN": overrides.Promtool,
		"ALERTMANAGER_BIN": overrides.Alertmanager, "AMTOOL_BIN": overrides.Amtool} {
		if p != "" && !isExecutable(p) {
			testenv.Unavailable(tb, "%s=%s is not an executable file; unset it to use the binaries %s builds", env, p, buildHint)
		}
	}
	if overrides.Prometheus != "" && overrides.Promtool != "" && overrides.Alertmanager != "" && overrides.Amtool != "" {
		return overrides
	}
	// Progress goes to stderr as well: go test shows a test's log only when it ends, and the
	// first build takes minutes.
	logf := func(format string, args ...any) {
		tb.Logf(format, args...)
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
	ctx, cancel := toolbuild.BuildContext(tb)
	defer cancel()
	b, err := EnsureBinaries(ctx, logf)
	switch {
	case errors.Is(err, toolbuild.ErrNotBuilt):
		testenv.Unavailable(tb, "%v", err)
	case errors.Is(err, toolbuild.ErrNoGo), errors.Is(err, toolbuild.ErrNoModuleProxy):
		testenv.Unavailable(tb, "Prometheus and Alertmanager cannot be built here: %v. Building them needs Go and "+
			"the Go module proxy (once; several minutes on two cores, or run %s beforehand)", err, buildHint)
	case err != nil:
		tb.Fatalf("Prometheus and Alertmanager: %v. A first run builds them, which takes several minutes on two "+
			"cores: give it a longer -timeout (e.g. -timeout 30m) or run %s first", err, buildHint)
	}
	if overrides.Prometheus != "" {
		b.Prometheus = overrides.Prometheus
	}
	if overrides.Promtool != "" {
		b.Promtool = overrides.Promtool
	}
	if overrides.Alertmanager != "" {
		b.Alertmanager = overrides.Alertmanager
	}
	if overrides.Amtool != "" {
		b.Amtool = overrides.Amtool
	}
	return b
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
