// Package helm builds, once, the helm command the chart's tests run (charts/), from the tools
// module tools/helm into bin/helm-<version>/ at the repository root, and finds it for a test.
package helm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/toolbuild"
)

// buildHint is the command that builds helm beforehand.
const buildHint = "make helm-binary"

// spec builds helm from tools/helm, a module of its own because helm brings its own Kubernetes
// library versions. The version is stamped as helm's own Makefile does, so `helm version` says
// v4.3.2 instead of v4.3.
var spec = toolbuild.Spec{
	Name:          "helm",
	ToolsDir:      "tools/helm",
	VersionModule: "helm.sh/helm/v4",
	Targets:       []toolbuild.Target{{Pkg: "helm.sh/helm/v4/cmd/helm", File: "helm"}},
	LDFlags: func(version string) []string {
		return []string{"-s", "-w",
			"-X", "helm.sh/helm/v4/internal/version.version=" + version,
			"-X", "helm.sh/helm/v4/internal/version.gitTreeState=clean",
		}
	},
	BuildHint: buildHint,
}

// EnsureBinary returns the path of the helm binary, building it first when the cache under
// bin/helm-<version>/ is missing or stale (a few minutes on two cores, once). Concurrent callers
// wait for one build; logf hears of progress. An error wrapping toolbuild.ErrNoGo or
// toolbuild.ErrNoModuleProxy means this machine cannot build it.
func EnsureBinary(ctx context.Context, logf func(format string, args ...any)) (string, error) {
	paths, err := toolbuild.Ensure(ctx, spec, logf)
	if err != nil {
		return "", err
	}
	return paths[0], nil
}

// RequireBinary returns the helm binary: HELM_BIN when set, otherwise the one built from the
// tools module (building it if needed). It skips under -short, ends the test through
// testenv.Unavailable when this machine cannot build helm, and fails it on any other error.
func RequireBinary(tb testing.TB) string {
	tb.Helper()
	testenv.SkipIfShort(tb, "runs helm (built from the Go module proxy)")
	if p := os.Getenv("HELM_BIN"); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			testenv.Unavailable(tb, "HELM_BIN=%s is not an executable file; unset it to use the helm %s builds", p, buildHint)
		}
		return p
	}
	// Progress goes to stderr as well: go test shows a test's log only when it ends.
	logf := func(format string, args ...any) {
		tb.Logf(format, args...)
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
	ctx, cancel := toolbuild.BuildContext(tb)
	defer cancel()
	p, err := EnsureBinary(ctx, logf)
	switch {
	case errors.Is(err, toolbuild.ErrNotBuilt):
		testenv.Unavailable(tb, "%v", err)
	case errors.Is(err, toolbuild.ErrNoGo), errors.Is(err, toolbuild.ErrNoModuleProxy):
		testenv.Unavailable(tb, "helm cannot be built here: %v. Building it needs Go and the Go module proxy "+
			"(once; a few minutes on two cores, or run %s beforehand)", err, buildHint)
	case err != nil:
		tb.Fatalf("helm: %v. A first run builds it, which takes a few minutes on two cores: give it a longer "+
			"-timeout or run %s first", err, buildHint)
	}
	return p
}
