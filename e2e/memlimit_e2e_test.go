package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// memoryCgroup makes a memory cgroup limited to limit bytes (cgroup v2's memory.max, or v1's
// memory.limit_in_bytes), removed in cleanup, and returns the file a process is moved in by.
func memoryCgroup(t testing.TB, limit int64) string {
	t.Helper()
	return namedMemoryCgroup(t, fmt.Sprintf("phe-test-%d", os.Getpid()), limit)
}

// namedMemoryCgroup is memoryCgroup with a name of the caller's (one cgroup per process when
// several run at once).
func namedMemoryCgroup(t testing.TB, name string, limit int64) string {
	t.Helper()
	for _, v := range []struct{ root, limitFile string }{
		{"/sys/fs/cgroup", "memory.max"},                   // v2
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"}, // v1
	} {
		if _, err := os.Stat(filepath.Join(v.root, "cgroup.procs")); err != nil {
			continue
		}
		if v.limitFile == "memory.max" {
			if _, err := os.Stat(filepath.Join(v.root, "cgroup.controllers")); err != nil {
				continue // the v1 hierarchy's root has no cgroup.controllers
			}
		}
		dir := filepath.Join(v.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			testenv.Unavailable(t, "cannot make a memory cgroup (root and a writable cgroup hierarchy are needed): %v", err)
		}
		t.Cleanup(func() { _ = os.Remove(dir) })
		if err := os.WriteFile(filepath.Join(dir, v.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			testenv.Unavailable(t, "cannot limit a memory cgroup: %v", err)
		}
		return filepath.Join(dir, "cgroup.procs")
	}
	testenv.Unavailable(t, "no memory cgroup hierarchy under /sys/fs/cgroup")
	return ""
}

// TestAutoMemLimit runs the binary in a memory cgroup of 512 MiB, as a container with that
// limit: --auto-gomemlimit (on by default) sets the runtime's soft limit to 0.9 of it, and says
// so in its log; --auto-gomemlimit.ratio changes the share; GOMEMLIMIT in the environment wins;
// a ratio out of (0, 1] is refused at start.
func TestAutoMemLimit(t *testing.T) {
	testenv.SkipIfShort(t, "makes a memory cgroup and runs the exporter binary in it")
	bin := binary(t)
	const limit = 512 << 20
	procs := memoryCgroup(t, limit)
	providers := filepath.Join(t.TempDir(), "providers.yml")
	testutil.ReplaceFile(t, providers, "providers: []\n")
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"default", nil, nil, fmt.Sprintf(`"GOMEMLIMIT":%d`, uint64(limit*9/10))},
		{"ratio", []string{"--auto-gomemlimit.ratio=0.5"}, nil, fmt.Sprintf(`"GOMEMLIMIT":%d`, limit/2)},
		{"environment", nil, []string{"GOMEMLIMIT=100MiB"}, `"msg":"GOMEMLIMIT is already set, skipping"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The shell moves itself into the cgroup, then becomes the exporter.
			script := fmt.Sprintf(`echo $$ > %s && exec "$0" "$@"`, procs)
			args := append([]string{"-c", script, bin, "--web.listen-address=127.0.0.1:0", "--log.format=json", "--config.file=" + providers}, tc.args...)
			cmd := exec.Command("sh", args...)
			cmd.Env = append(os.Environ(), tc.env...)
			logs := &testutil.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = logs, logs
			p := testutil.StartProcess(t, cmd)
			testutil.ListenAddress(t, logs, p.Exited)
			testutil.Eventually(t, 30*time.Second, "the log says "+tc.want, func() bool { return strings.Contains(logs.String(), tc.want) })
		})
	}
	out, err := exec.Command(bin, "--auto-gomemlimit.ratio=1.5", "--config.file="+providers).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--auto-gomemlimit.ratio=1.5: must be above 0 and at most 1") {
		t.Errorf("a ratio of 1.5: %v, want a refusal naming the flag:\n%s", err, out)
	}
}
