package hostpool

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/provider-health-exporter/provider-health-exporter/internal/filestate"
)

// credentials caches what the dials read from files: the client key (with its passphrase) and
// the known_hosts callback, each read again only when its file changed. Every dial checks the
// files (a stat each), so a rotated key or a corrected known_hosts takes effect at the next
// dial, without a reload; links already open keep working with what they authenticated with.
type credentials struct {
	mu sync.Mutex

	keyVer, passVer filestate.State
	keyRead         bool
	signer          ssh.Signer
	signerErr       error
	keyLoads        int // how many times the key was read: a test's view of the cache

	khVer   filestate.State
	khRead  bool
	kh      *knownHosts
	khErr   error
	khLoads int
	// algos caches the host key algorithms of each address for the current callback.
	algos map[string][]string
}

// signer returns the client's key: the caller's, or the key file's, read again when the key
// file or the passphrase file changed since the last read.
func (p *Pool) signer() (ssh.Signer, error) {
	if p.opts.Signer != nil {
		return p.opts.Signer, nil
	}
	c := &p.creds
	keyVer, err := filestate.Stat(p.opts.PrivateKeyFile)
	if err != nil && p.opts.PrivateKeyFile != "" {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	passVer, err := filestate.Stat(p.opts.PassphraseFile)
	if err != nil {
		return nil, fmt.Errorf("read passphrase file: %w", err)
	}
	c.mu.Lock()
	if c.keyRead && keyVer == c.keyVer && passVer == c.passVer {
		defer c.mu.Unlock()
		return c.signer, c.signerErr
	}
	c.mu.Unlock()
	// Read without the lock, so that no dial waits on another's read; two dials may both
	// read a changed key, the last one's result stays.
	s, err := loadSigner(p.opts.PrivateKeyFile, p.opts.PassphraseFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keyVer, c.passVer, c.keyRead = keyVer, passVer, true
	c.signer, c.signerErr = s, err
	c.keyLoads++
	if err == nil && c.keyLoads > 1 {
		p.logger.Info("ssh private key changed: new dials use the new key", "hostpool", p.opts.Name, "file", p.opts.PrivateKeyFile)
	}
	return s, err
}

// hostKeyCallback returns the callback that verifies addr's host key: the caller's, known_hosts'
// (the file read again only when it changed, each dial given the lines that can name its
// address: knownHosts), or none at all when verification is explicitly switched off.
func (p *Pool) hostKeyCallback(addr string) (ssh.HostKeyCallback, error) {
	switch {
	case p.opts.HostKeyCallback != nil:
		return p.opts.HostKeyCallback, nil
	case p.opts.InsecureSkipHostKeyVerification:
		return ssh.InsecureIgnoreHostKey(), nil
	case p.opts.KnownHostsFile == "":
		return nil, errors.New("no known_hosts file configured (and host key verification is not switched off)")
	}
	c := &p.creds
	ver, err := filestate.Stat(p.opts.KnownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	c.mu.Lock()
	if c.khRead && ver == c.khVer {
		kh, err := c.kh, c.khErr
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return kh.callback(addr)
	}
	c.mu.Unlock()
	// Read bounded (a regular file, a size limit, a deadline) and parsed without the lock.
	kh, err := loadKnownHosts(p.opts.KnownHostsFile)
	if err != nil {
		err = fmt.Errorf("read known_hosts: %w", err)
	}
	c.mu.Lock()
	c.khVer, c.khRead, c.kh, c.khErr = ver, true, kh, err
	c.algos = nil
	c.khLoads++
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return kh.callback(addr)
}

// algorithms returns the host key algorithms to offer addr (see hostKeyAlgorithms), computed
// once per address and known_hosts version rather than at every dial.
func (p *Pool) algorithms(cb ssh.HostKeyCallback, addr string, remote net.Addr) []string {
	c := &p.creds
	c.mu.Lock()
	if a, ok := c.algos[addr]; ok {
		c.mu.Unlock()
		return a
	}
	c.mu.Unlock()
	a := hostKeyAlgorithms(cb, addr, remote)
	c.mu.Lock()
	if c.algos == nil {
		c.algos = map[string][]string{}
	}
	c.algos[addr] = a
	c.mu.Unlock()
	return a
}

// forget drops what is cached for addr (a host removed from the pool).
func (c *credentials) forget(addr string) {
	c.mu.Lock()
	delete(c.algos, addr)
	c.mu.Unlock()
}

// probeKey is a public key no host has: hostKeyAlgorithms shows it to the callback to learn
// which keys known_hosts wants. Made once per process, not per dial.
var probeKey = sync.OnceValue(func() ssh.PublicKey {
	// A fixed seed: the key only has to be one that no host presents.
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, "provider-health-exporter probe")
	k, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(seed).Public())
	if err != nil {
		panic(err) // an ed25519 public key always converts
	}
	return k
})
