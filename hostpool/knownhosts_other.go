//go:build !linux

package hostpool

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// parseKnownHosts parses b, known_hosts text read from path, through a temporary file
// (knownhosts.New opens files by path only); its parse errors name path.
func parseKnownHosts(b []byte, path string) (ssh.HostKeyCallback, error) {
	f, err := os.CreateTemp("", "known_hosts")
	if err != nil {
		return nil, fmt.Errorf("%s: a copy to parse: %w", path, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s: a copy to parse: %w", path, err)
	}
	cb, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), f.Name(), path))
	}
	return cb, nil
}
