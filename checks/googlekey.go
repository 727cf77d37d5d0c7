package checks

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
)

// ServiceAccountKeyProblem checks that b, read from path, is a Google service-account key whose
// private key parses, so that a broken key is reported when it is loaded, with a short message
// naming the file, rather than at every token exchange with the parser's dump (which could quote
// the key). The types that authenticate with Google credentials (gcp, kubernetes with
// `auth: google`) read their key through it.
func ServiceAccountKeyProblem(path string, b []byte) error {
	var f struct {
		PrivateKey string `json:"private_key"`
	}
	if json.Unmarshal(b, &f) != nil {
		// The decoder's error quotes the file's content; name the file only.
		return fmt.Errorf("key file %s is not a JSON service-account key", path)
	}
	if f.PrivateKey == "" {
		return fmt.Errorf("key file %s has no private_key", path)
	}
	block, _ := pem.Decode([]byte(f.PrivateKey))
	if block == nil {
		return fmt.Errorf("key file %s: private_key is not PEM-encoded", path)
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if _, err1 := x509.ParsePKCS1PrivateKey(block.Bytes); err1 != nil {
			// The parsers' errors describe the DER structure; say only what is wrong.
			return fmt.Errorf("key file %s: private_key is neither a PKCS#8 nor a PKCS#1 private key", path)
		}
	}
	return nil
}
