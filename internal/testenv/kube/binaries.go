package kube

import (
	"context"
	"strings"

	"github.com/provider-health-exporter/provider-health-exporter/internal/testenv/toolbuild"
)

// spec is what the tools module tools/kube builds, into bin/kube-<version>/.
var spec = toolbuild.Spec{
	Name:          "kube",
	ToolsDir:      "tools/kube",
	VersionModule: "k8s.io/kubernetes",
	Targets: []toolbuild.Target{
		{Pkg: "k8s.io/kubernetes/cmd/kube-apiserver", File: "kube-apiserver"},
		{Pkg: "go.etcd.io/etcd/server/v3", File: "etcd"},
	},
	// kube-apiserver reports this version (kubectl version, /version) instead of v0.0.0-master.
	LDFlags: func(version string) []string {
		minor := ""
		if parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3); len(parts) >= 2 {
			minor = parts[1]
		}
		return []string{
			"-s", "-w",
			"-X", "k8s.io/component-base/version.gitVersion=" + version,
			"-X", "k8s.io/component-base/version.gitMajor=1",
			"-X", "k8s.io/component-base/version.gitMinor=" + minor,
			"-X", "k8s.io/component-base/version.gitTreeState=clean",
		}
	},
	BuildHint: "scripts/build-kube.sh",
}

// The build failures that mean this machine cannot build the binaries, as opposed to a bug in
// the tools module or in this package: EnsureBinaries's error wraps one of them when so.
var (
	ErrNoGo          = toolbuild.ErrNoGo
	ErrNoModuleProxy = toolbuild.ErrNoModuleProxy
)

// EnsureBinaries returns the paths of the kube-apiserver and etcd binaries built from the tools
// module, building them first when the cache under bin/kube-<version>/ (at the repository root)
// is missing or stale (see toolbuild.Ensure: one build at a time across processes, progress
// every 30 seconds through logf). Only the first run pays for the build (several minutes on two
// cores). An error that wraps ErrNoGo or ErrNoModuleProxy means this machine cannot build them;
// any other is a bug to report.
func EnsureBinaries(ctx context.Context, logf func(format string, args ...any)) (apiserver, etcd string, err error) {
	paths, err := toolbuild.Ensure(ctx, spec, logf)
	if err != nil {
		return "", "", err
	}
	return paths[0], paths[1], nil
}
