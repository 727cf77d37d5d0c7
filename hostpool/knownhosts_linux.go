package hostpool

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sys/unix"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// knownHostsCallback parses the known_hosts file at path, read through fileread (a regular
// file only, at most KnownHostsLimit, within its deadline). knownhosts.New opens files by path
// only, so the bytes read reach it through an in-memory file (memfd, by its /proc/self/fd
// path): it never opens the operator's path itself. Its parse errors name path.
func knownHostsCallback(path string) (ssh.HostKeyCallback, error) {
	b, err := fileread.Read(path, fileread.KnownHostsLimit)
	if err != nil {
		return nil, err
	}
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
