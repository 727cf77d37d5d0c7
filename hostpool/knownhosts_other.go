//go:build !linux

package hostpool

import (
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// knownHostsCallback parses the known_hosts file at path once fileread.Check passed (a regular
// file of at most KnownHostsLimit); knownhosts.New then opens it by its path. Linux reads it
// through fileread itself (knownhosts_linux.go).
func knownHostsCallback(path string) (ssh.HostKeyCallback, error) {
	if err := fileread.Check(path, fileread.KnownHostsLimit); err != nil {
		return nil, err
	}
	return knownhosts.New(path)
}
