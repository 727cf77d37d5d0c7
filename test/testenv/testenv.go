// Package testenv starts the real systems the exporter's integration tests talk to (a Kubernetes
// API server, KVM hosts in network namespaces, a GCE wire server, Prometheus and Alertmanager),
// one sub-package each. This package holds what they share: how a test says a part is missing.
package testenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// RequireIntegration reports whether a missing part must fail the test instead of skipping it
// (REQUIRE_INTEGRATION=1, as CI sets).
func RequireIntegration() bool { return os.Getenv("REQUIRE_INTEGRATION") == "1" }

// Unavailable ends the test because a part of the test environment cannot run here: it skips
// with the message (which should say what to install), or fails under REQUIRE_INTEGRATION=1.
// Under -short it always skips: the test needed a real system, which -short leaves out.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if RequireIntegration() && !Short() {
		tb.Fatalf("REQUIRE_INTEGRATION=1 and a part of the test environment is missing: %s", msg)
	}
	tb.Skipf("skipped: %s", msg)
}

// SkipIfShort skips the test under go test -short (make test-unit): what names the real system
// it would start or the root it would need. REQUIRE_INTEGRATION=1 does not turn this skip into a
// failure: -short asks for the tests that need no real system, and CI never runs it. Outside a
// test binary (the demo launcher passes its own testing.TB) it does nothing.
func SkipIfShort(tb testing.TB, what string) {
	tb.Helper()
	if Short() {
		tb.Skipf("skipped: %s (-short)", what)
	}
}

// Short reports whether this is a test binary run with -short. Unlike testing.Short it is false,
// instead of a panic, outside a test binary and before the test flags are parsed (a TestMain that
// runs something else, as the demo launcher's does).
func Short() bool { return testing.Testing() && flag.Parsed() && testing.Short() }

// ChildEnv is the environment of a test process that a test starts by re-running its own binary:
// this process's environment plus extra ("KEY=value"), with TMPDIR and GOTMPDIR, where the child's
// os.MkdirTemp and t.TempDir create their directories, set to tmp. A child that is killed or
// crashes on purpose cannot remove its own temporary directories, so tmp should be a directory
// under the parent's t.TempDir(): the parent's cleanup then removes whatever the child left.
func ChildEnv(tmp string, extra ...string) []string {
	env := make([]string, 0, len(os.Environ())+len(extra)+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "GOTMPDIR=") {
			env = append(env, kv)
		}
	}
	env = append(env, "TMPDIR="+tmp, "GOTMPDIR="+tmp)
	return append(env, extra...)
}

// KVMBlock describes a fleet of KVM test hosts as a kvm provider block of the providers file
// names it (kvmhost and kvmstandin fleets). The kvm provider type's own block type is built
// from it by the tests that need one.
type KVMBlock struct {
	User, PrivateKeyFile, KnownHostsFile, Socket, StoragePool string
	Hosts                                                     []KVMTarget
}

// KVMTarget is one host of a KVMBlock: its address (host:port) and target name.
type KVMTarget struct {
	Address, Name string
}
