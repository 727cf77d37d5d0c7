package kube

import (
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// process is one daemon the environment runs (etcd or kube-apiserver).
type process = testenv.Daemon

// startProcess starts path with args, stdout and stderr appended to logPath; the process dies
// with the test process (see testenv.StartDaemon).
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	return testenv.StartDaemon(name, path, args, logPath)
}

// killTimeout bounds the wait for a killed daemon to be reaped. Every piece of state lives in the
// test's temporary directory, so nothing needs a graceful shutdown; etcd's data stays consistent
// across a kill, which is what a restart of the API server relies on.
const killTimeout = 30 * time.Second
