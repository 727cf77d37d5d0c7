package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/licensecheck"
	"golang.org/x/mod/module"
)

// maxLicenseFile caps the bytes read of one license or copyright file; real ones are a few
// tens of kilobytes.
const maxLicenseFile = 1 << 20

// licenseFileName matches the files of a module's root that hold its license.
var licenseFileName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([-._].*)?$`)

// spdxIDChars are the characters of a LicenseRef's idstring.
var spdxIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// licenseFinder finds the licenses of Go modules, caching by module version (each platform's
// SBOM lists the same modules).
type licenseFinder struct {
	modCache string
	cache    map[string]string
}

func newLicenseFinder() *licenseFinder {
	dir := os.Getenv("GOMODCACHE")
	if dir == "" {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			dir = strings.TrimSpace(string(out))
		}
	}
	return &licenseFinder{modCache: dir, cache: map[string]string{}}
}

// goModule returns the SPDX license expression of a module version's license files, found in
// the module cache (downloaded with go mod download when missing): the licenses licensecheck
// recognises in them, joined with AND, or NOASSERTION when it recognises none.
func (f *licenseFinder) goModule(path, version string) (string, error) {
	key := path + "@" + version
	if l, ok := f.cache[key]; ok {
		return l, nil
	}
	dir, err := f.moduleDir(path, version)
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("module %s: %w", key, err)
	}
	var ids []string
	for _, e := range ents {
		if !e.Type().IsRegular() || !licenseFileName.MatchString(e.Name()) {
			continue
		}
		text, err := readCapped(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		for _, m := range licensecheck.Scan(text).Match {
			if !slices.Contains(ids, m.ID) {
				ids = append(ids, m.ID)
			}
		}
	}
	l := expression(ids)
	f.cache[key] = l
	return l, nil
}

// moduleDir is a module version's directory in the module cache.
func (f *licenseFinder) moduleDir(path, version string) (string, error) {
	ep, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(f.modCache, ep+"@"+ev)
	if st, err := os.Stat(dir); err == nil && st.IsDir() && f.modCache != "" {
		return dir, nil
	}
	out, err := exec.Command("go", "mod", "download", "-json", path+"@"+version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s, for its license: %w", path, version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: no directory (%v %s)", path, version, err, m.Error)
	}
	return m.Dir, nil
}

// debianLicenses returns the SPDX expression of a Debian package's licenses: the License fields
// of its machine-readable copyright file (/usr/share/doc/<pkg>/copyright), names that are not
// SPDX identifiers as LicenseRef-<name>.
func debianLicenses(pkg string) (string, error) {
	text, err := readCapped(filepath.Join("/usr/share/doc", pkg, "copyright"))
	if err != nil {
		return "", err
	}
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "License:")
		if !ok {
			continue
		}
		for _, name := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == '\t' }) {
			if name == "or" || name == "and" || name == "" {
				continue
			}
			id := debianToSPDX(name)
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return expression(ids), sc.Err()
}

// debianToSPDX maps a DEP-5 short name to an SPDX identifier: "GPL-2+" is GPL-2.0-or-later,
// "MPL-2.0" stays, a name SPDX does not know becomes LicenseRef-<name>.
func debianToSPDX(name string) string {
	known := map[string]string{
		"GPL-2": "GPL-2.0-only", "GPL-2+": "GPL-2.0-or-later", "GPL-3": "GPL-3.0-only", "GPL-3+": "GPL-3.0-or-later",
		"LGPL-2.1": "LGPL-2.1-only", "LGPL-2.1+": "LGPL-2.1-or-later", "MPL-2.0": "MPL-2.0", "Expat": "MIT",
		"BSD-3-clause": "BSD-3-Clause", "BSD-2-clause": "BSD-2-Clause", "Apache-2.0": "Apache-2.0",
	}
	if id, ok := known[name]; ok {
		return id
	}
	return "LicenseRef-" + strings.Trim(spdxIDChars.ReplaceAllString(name, "-"), "-")
}

// expression joins license identifiers with AND, sorted; none is NOASSERTION.
func expression(ids []string) string {
	if len(ids) == 0 {
		return "NOASSERTION"
	}
	slices.Sort(ids)
	return strings.Join(ids, " AND ")
}

// readCapped reads a regular file of at most maxLicenseFile bytes.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxLicenseFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxLicenseFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxLicenseFile)
	}
	return b, nil
}
