package kvmhost

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// hostKeyTypes are the host key types every host has. Several types per host exercise the
// client's host-key algorithm choice against known_hosts.
var hostKeyTypes = []string{"ed25519", "ecdsa", "rsa"}

// hostKeyPath is where a host's private key of the given type lives.
func hostKeyPath(dir, keyType string) string {
	return filepath.Join(dir, "ssh_host_"+keyType+"_key")
}

func newKey(keyType string) (crypto.Signer, error) {
	switch keyType {
	case "ed25519":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	case "ecdsa":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "rsa":
		// 2048 bits: the smallest size OpenSSH accepts, and the fastest to generate.
		return rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, fmt.Errorf("unknown key type %q", keyType)
	}
}

// writePrivateKey writes key in the OpenSSH format, without a passphrase, readable by root only,
// and returns its public half.
func writePrivateKey(path string, key crypto.Signer, comment string) (ssh.PublicKey, error) {
	block, err := ssh.MarshalPrivateKey(key, comment)
	if err != nil {
		return nil, fmt.Errorf("marshal key %s: %w", path, err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("public key of %s: %w", path, err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(pub), 0o644); err != nil {
		return nil, fmt.Errorf("write public key: %w", err)
	}
	return pub, nil
}

// writeHostKeys generates a fresh key of every host key type into dir, concurrently because RSA
// generation dominates a host's start time, and returns the public keys in hostKeyTypes order.
func writeHostKeys(dir, hostname string) ([]ssh.PublicKey, error) {
	pubs := make([]ssh.PublicKey, len(hostKeyTypes))
	errs := make([]error, len(hostKeyTypes))
	var wg sync.WaitGroup
	for i, kt := range hostKeyTypes {
		wg.Go(func() {
			key, err := newKey(kt)
			if err != nil {
				errs[i] = fmt.Errorf("generate %s host key: %w", kt, err)
				return
			}
			pubs[i], errs[i] = writePrivateKey(hostKeyPath(dir, kt), key, "root@"+hostname)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return pubs, nil
}

// knownHostsLines renders one known_hosts line per key of the host at addr ("ip:port").
func knownHostsLines(addr string, keys []ssh.PublicKey) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, k))
		b.WriteByte('\n')
	}
	return b.String()
}
