package hostpool

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // OpenSSH's hashed known_hosts names are HMAC-SHA1.
	"encoding/base64"
	"net"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// knownHosts is a known_hosts file kept as text, indexed by the hosts its lines name. A fleet's
// file lists every host of the fleet, and x/crypto's parsed form of it costs about 1.5 KB a
// line; a replica of a shard dials only the hosts it owns. So the file is parsed whole once (to
// report its errors as knownhosts does), then each dial gets a callback parsed from the lines
// that can name its address only (callback), which the link keeps for its key re-exchanges.
type knownHosts struct {
	path  string
	lines []string // the file's lines, substrings of one string
	// every lists the lines every address gets: markers (@cert-authority, @revoked), patterns
	// with wildcards or negations, and whatever this index does not read (knownhosts then
	// judges them as it would in the whole file).
	every []int
	// byAddr lists the lines of plain host patterns, by the address they name.
	byAddr map[hostAddr][]int
	// hashed are the lines of one hashed host name (|1|salt|hash), matched at each dial.
	hashed []hashedLine
}

// hostAddr is a host and port as knownhosts reads them from a pattern (port 22 when it has
// none) and from a dialled address.
type hostAddr struct{ host, port string }

type hashedLine struct {
	salt, hash []byte
	line       int
}

// loadKnownHosts reads the known_hosts file at path (through fileread: a regular file of at
// most KnownHostsLimit), checks that knownhosts accepts it whole, and indexes it.
func loadKnownHosts(path string) (*knownHosts, error) {
	b, err := fileread.Read(path, fileread.KnownHostsLimit)
	if err != nil {
		return nil, err
	}
	if _, err := parseKnownHosts(b, path); err != nil {
		return nil, err
	}
	kh := &knownHosts{path: path, lines: strings.Split(string(b), "\n"), byAddr: map[hostAddr][]int{}}
	for i, line := range kh.lines {
		kh.index(i, strings.Trim(line, " \t\r"))
	}
	return kh, nil
}

// index files line i under the addresses it can match.
func (kh *knownHosts) index(i int, line string) {
	if line == "" || line[0] == '#' {
		return
	}
	hosts, _, _ := strings.Cut(strings.ReplaceAll(line, "\t", " "), " ")
	if hosts == "" || hosts[0] == '@' {
		kh.every = append(kh.every, i)
		return
	}
	if hosts[0] == '|' {
		if salt, hash, ok := decodeHashedHost(hosts); ok {
			kh.hashed = append(kh.hashed, hashedLine{salt: salt, hash: hash, line: i})
		} else {
			kh.every = append(kh.every, i)
		}
		return
	}
	var addrs []hostAddr
	for p := range strings.SplitSeq(hosts, ",") {
		if p == "" {
			continue // knownhosts skips empty patterns
		}
		if strings.ContainsAny(p, "*?!|") {
			kh.every = append(kh.every, i)
			return
		}
		// As knownhosts reads a pattern: host:port (bracketed or not), else a host on port 22.
		a := hostAddr{port: "22"}
		var err error
		if a.host, a.port, err = net.SplitHostPort(p); err != nil {
			if p[0] == '[' {
				kh.every = append(kh.every, i) // knownhosts rejects it: let it say so
				return
			}
			a = hostAddr{host: p, port: "22"}
		}
		addrs = append(addrs, a)
	}
	for _, a := range addrs {
		if l := kh.byAddr[a]; len(l) == 0 || l[len(l)-1] != i {
			kh.byAddr[a] = append(l, i)
		}
	}
}

// decodeHashedHost reads OpenSSH's hashed host name |1|salt|hash, as knownhosts does.
func decodeHashedHost(s string) (salt, hash []byte, ok bool) {
	parts := strings.Split(s, "|")
	if len(parts) != 4 || parts[1] != "1" {
		return nil, nil, false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	hash, err2 := base64.StdEncoding.DecodeString(parts[3])
	return salt, hash, err1 == nil && err2 == nil
}

// callback returns the callback that verifies the host key of addr (host:port, as dialled):
// knownhosts' own, over the file's lines that can name addr, in the file's order. Its verdicts
// on addr are those of the whole file's callback.
func (kh *knownHosts) callback(addr string) (ssh.HostKeyCallback, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// knownhosts fails such an address itself; let it, over the whole file.
		return parseKnownHosts([]byte(strings.Join(kh.lines, "\n")), kh.path)
	}
	picked := append(slices.Clone(kh.every), kh.byAddr[hostAddr{host, port}]...)
	if len(kh.hashed) > 0 {
		// knownhosts hashes the address in its normalized form, host:port joined as it joins
		// them.
		h := host
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		name := []byte(knownhosts.Normalize(h + ":" + port))
		for _, hl := range kh.hashed {
			mac := hmac.New(sha1.New, hl.salt)
			mac.Write(name)
			if hmac.Equal(mac.Sum(nil), hl.hash) {
				picked = append(picked, hl.line)
			}
		}
	}
	slices.Sort(picked)
	var b bytes.Buffer
	for _, i := range picked {
		b.WriteString(kh.lines[i])
		b.WriteByte('\n')
	}
	cb, err := parseKnownHosts(b.Bytes(), kh.path)
	if err != nil {
		// Every line that names addr is one knownhosts skips (the whole file has valid
		// lines: loadKnownHosts checked it): for addr, the file has no key.
		return parseKnownHosts(nil, kh.path)
	}
	return cb, nil
}
