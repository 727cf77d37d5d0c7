package hostpool

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sys/unix"
)

// parseKnownHosts parses b, known_hosts text read from path. knownhosts.New opens files by path
// only, so b reaches it through an in-memory file (memfd, by its /proc/self/fd path): it never
// opens the operator's path itself. Its parse errors name path.
func parseKnownHosts(b []byte, path string) (ssh.HostKeyCallback, error) {
	fd, err := unix.MemfdCreate("known_hosts", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: an in-memory copy to parse: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), "known_hosts")
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return nil, fmt.Errorf("%s: an in-memory copy to parse: %w", path, err)
	}
	mem := fmt.Sprintf("/proc/self/fd/%d", fd)
	cb, err := knownhosts.New(mem)
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), mem, path))
	}
	return cb, nil
}
