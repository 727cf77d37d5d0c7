package kvmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// run runs a short command to completion and returns its combined output.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.WaitDelay = time.Second
	d, err := testenv.StartCommand(name, cmd, "")
	if err != nil {
		return "", err
	}
	<-d.Done()
	if err := d.WaitErr(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// withLog adds the end of the daemon's log to err, which is usually where the reason is.
func withLog(d *testenv.Daemon, err error) error {
	return fmt.Errorf("%w; end of %s: %s", err, d.LogPath, strings.ReplaceAll(d.LogTail(15), "\n", " | "))
}

// waitFor polls cond until it reports true, fails, the daemon exits, or the timeout passes.
func waitFor(d *testenv.Daemon, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		ok, err := cond()
		if err != nil {
			return withLog(d, fmt.Errorf("wait for %s: %w", what, err))
		}
		if ok {
			return nil
		}
		if d.Exited() {
			return withLog(d, fmt.Errorf("%s exited before %s: %v", d.Name, what, d.WaitErr()))
		}
		if time.Now().After(deadline) {
			return withLog(d, fmt.Errorf("%s: %w after %s", what, errTimeout, timeout))
		}
		time.Sleep(delay)
	}
}

var errTimeout = errors.New("timed out")
