package kube

import (
	"context"
	"strings"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/toolbuild"
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
	LDFlags:   versionLDFlags,
	BuildHint: "scripts/build-kube.sh",
}

// nodeSpec is the rest of a one-node cluster (make cluster, test/testenv/cluster), from the
// same tools module and Kubernetes release, into bin/kube-node-<version>/: a cache of its own, so
// the API server tests never wait for a kubelet build.
var nodeSpec = toolbuild.Spec{
	Name:          "kube-node",
	ToolsDir:      "tools/kube",
	VersionModule: "k8s.io/kubernetes",
	Targets: []toolbuild.Target{
		{Pkg: "k8s.io/kubernetes/cmd/kube-controller-manager", File: "kube-controller-manager"},
		{Pkg: "k8s.io/kubernetes/cmd/kube-scheduler", File: "kube-scheduler"},
		{Pkg: "k8s.io/kubernetes/cmd/kubelet", File: "kubelet"},
		{Pkg: "k8s.io/kubernetes/cmd/kube-proxy", File: "kube-proxy"},
	},
	LDFlags:   versionLDFlags,
	BuildHint: "scripts/build-kube.sh -node",
}

// versionLDFlags makes the binaries report version (kubectl version, /version, the node's
// kubeletVersion) instead of v0.0.0-master.
func versionLDFlags(version string) []string {
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

// NodeBinaries are the paths of the node's binaries beside the API server's.
type NodeBinaries struct {
	ControllerManager, Scheduler, Kubelet, Proxy string
}

// EnsureNodeBinaries is EnsureBinaries for kube-controller-manager, kube-scheduler, kubelet and
// kube-proxy (bin/kube-node-<version>/; about 5 minutes on two cores the first time).
func EnsureNodeBinaries(ctx context.Context, logf func(format string, args ...any)) (NodeBinaries, error) {
	paths, err := toolbuild.Ensure(ctx, nodeSpec, logf)
	if err != nil {
		return NodeBinaries{}, err
	}
	return NodeBinaries{ControllerManager: paths[0], Scheduler: paths[1], Kubelet: paths[2], Proxy: paths[3]}, nil
}
