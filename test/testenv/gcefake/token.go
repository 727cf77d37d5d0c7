package gcefake

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// serviceAccount is a key the server made: it trusts assertions signed by it.
type serviceAccount struct {
	email string
	keyID string
	pub   *rsa.PublicKey
}

// serviceAccountFile is the JSON key file format of Google service accounts.
type serviceAccountFile struct {
	Type                    string `json:"type"`
	ProjectID               string `json:"project_id"`
	PrivateKeyID            string `json:"private_key_id"`
	PrivateKey              string `json:"private_key"`
	ClientEmail             string `json:"client_email"`
	ClientID                string `json:"client_id"`
	AuthURI                 string `json:"auth_uri"`
	TokenURI                string `json:"token_uri"`
	AuthProviderX509CertURL string `json:"auth_provider_x509_cert_url"`
	ClientX509CertURL       string `json:"client_x509_cert_url"`
	UniverseDomain          string `json:"universe_domain"`
}

// ServiceAccountKey makes a service account with a fresh RSA key that the token endpoint
// trusts, writes its JSON key file (token_uri pointing at this server) into a temporary
// directory of the test and returns the file's path.
func (s *Server) ServiceAccountKey(t testing.TB) string {
	t.Helper()
	f, key := s.newServiceAccount(t)
	s.mu.Lock()
	s.keys[f.ClientEmail] = &serviceAccount{email: f.ClientEmail, keyID: f.PrivateKeyID, pub: &key.PublicKey}
	s.mu.Unlock()
	return writeKeyFile(t, f)
}

// UntrustedServiceAccountKey writes a key file shaped exactly like ServiceAccountKey's, naming
// a service account the server knows, but signed by a private key the server has never seen:
// the token endpoint refuses its assertions (invalid_grant, "Invalid JWT Signature.").
func (s *Server) UntrustedServiceAccountKey(t testing.TB) string {
	t.Helper()
	trusted, key := s.newServiceAccount(t)
	s.mu.Lock()
	s.keys[trusted.ClientEmail] = &serviceAccount{email: trusted.ClientEmail, keyID: trusted.PrivateKeyID, pub: &key.PublicKey}
	s.mu.Unlock()
	impostor, _ := s.newServiceAccount(t)
	impostor.ClientEmail, impostor.ClientID, impostor.PrivateKeyID =
		trusted.ClientEmail, trusted.ClientID, trusted.PrivateKeyID
	return writeKeyFile(t, impostor)
}

func (s *Server) newServiceAccount(t testing.TB) (serviceAccountFile, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("generate service-account key: %v", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal service-account key: %v", err)
	}
	s.mu.Lock()
	s.nextID++
	n := s.nextID
	projectName := DefaultProject
	if _, ok := s.projects[DefaultProject]; !ok {
		names := make([]string, 0, len(s.projects))
		for p := range s.projects {
			names = append(names, p)
		}
		sort.Strings(names)
		if len(names) > 0 {
			projectName = names[0]
		}
	}
	s.mu.Unlock()
	email := fmt.Sprintf("phe-%d@%s.iam.gserviceaccount.com", n%100000, projectName)
	return serviceAccountFile{
		Type:                    "service_account",
		ProjectID:               projectName,
		PrivateKeyID:            randomHex(20),
		PrivateKey:              string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		ClientEmail:             email,
		ClientID:                fmt.Sprintf("%d", n),
		AuthURI:                 s.URL() + "/auth",
		TokenURI:                s.TokenURL(),
		AuthProviderX509CertURL: s.URL() + "/certs",
		ClientX509CertURL:       s.URL() + "/robot/v1/metadata/x509/" + email,
		UniverseDomain:          "googleapis.com",
	}, key
}

func writeKeyFile(t testing.TB, f serviceAccountFile) string {
	t.Helper()
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		t.Fatalf("encode service-account key: %v", err)
	}
	path := filepath.Join(t.TempDir(), "service-account.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("write service-account key: %v", err)
	}
	return path
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return fmt.Sprintf("%x", b)
}

// oauthError is the error body of Google's OAuth token endpoint.
type oauthError struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

// maxAssertionLifetime is how long an assertion may live (exp - iat), as Google enforces.
const maxAssertionLifetime = time.Hour

// clockSkew is the tolerance for iat and exp against the server's clock.
const clockSkew = 5 * time.Minute

// serveToken is the token endpoint of the two-legged service-account flow: it verifies the
// JWT-bearer assertion and issues an access token.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.tokenReqs++
	latency, failure := s.tokenLatency, s.tokenFailure
	s.mu.Unlock()
	if !s.wait(r, latency) {
		return
	}
	if failure != 0 {
		writeOAuthFailure(w, failure)
		return
	}
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError{"invalid_request", "Could not parse the request body."})
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != GrantTypeJWTBearer {
		writeJSON(w, http.StatusBadRequest, oauthError{"unsupported_grant_type", "Invalid grant_type: " + gt})
		return
	}
	email, err := s.verifyAssertion(r.PostForm.Get("assertion"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, *err)
		return
	}
	tok := "ya29.fake-" + randomString(32)
	s.mu.Lock()
	lifetime := s.tokenLifetime
	s.tokens[tok] = time.Now().Add(lifetime)
	s.tokenEmail[tok] = email
	s.issued = append(s.issued, tok)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": tok,
		"token_type":   "Bearer",
		"expires_in":   int(lifetime / time.Second),
	})
}

// jwtClaims are the claims of a service-account assertion.
type jwtClaims struct {
	Iss   string `json:"iss"`
	Scope string `json:"scope"`
	Aud   string `json:"aud"`
	Exp   int64  `json:"exp"`
	Iat   int64  `json:"iat"`
	Sub   string `json:"sub,omitempty"`
}

// verifyAssertion checks a JWT-bearer assertion and returns the service account it is for.
func (s *Server) verifyAssertion(assertion string) (string, *oauthError) {
	invalid := func(desc string) (string, *oauthError) { return "", &oauthError{"invalid_grant", desc} }
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return invalid("Invalid JWT: not a compact JWS.")
	}
	var header struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
		Kid string `json:"kid"`
	}
	var claims jwtClaims
	if err := decodeSegment(parts[0], &header); err != nil {
		return invalid("Invalid JWT: bad header.")
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return invalid("Invalid JWT: bad claim set.")
	}
	if header.Alg != "RS256" {
		return invalid("Invalid JWT: unsupported algorithm " + header.Alg + ".")
	}
	s.mu.Lock()
	sa, ok := s.keys[claims.Iss]
	s.mu.Unlock()
	if !ok {
		return invalid("Invalid grant: account not found")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return invalid("Invalid JWT Signature.")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(sa.pub, crypto.SHA256, digest[:], sig); err != nil {
		return invalid("Invalid JWT Signature.")
	}
	if header.Kid != "" && header.Kid != sa.keyID {
		return invalid("Invalid JWT Signature.")
	}
	if claims.Aud != s.TokenURL() {
		return invalid(fmt.Sprintf("Invalid JWT: Failed audience check. The expected value was %s, received %s", s.TokenURL(), claims.Aud))
	}
	now := time.Now()
	iat, exp := time.Unix(claims.Iat, 0), time.Unix(claims.Exp, 0)
	if claims.Iat == 0 || claims.Exp == 0 || iat.After(now.Add(clockSkew)) || exp.Before(now.Add(-clockSkew)) ||
		!exp.After(iat) || exp.Sub(iat) > maxAssertionLifetime {
		return invalid("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
	}
	if strings.TrimSpace(claims.Scope) == "" {
		return "", &oauthError{"invalid_scope", "Invalid OAuth scope or ID token audience provided."}
	}
	return claims.Iss, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return fmt.Errorf("decode JWT segment: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse JWT segment: %w", err)
	}
	return nil
}

// writeOAuthFailure answers a token exchange the way Google's token endpoint fails with this
// status.
func writeOAuthFailure(w http.ResponseWriter, code int) {
	e := oauthError{"internal_failure", "Backend error."}
	switch code {
	case http.StatusBadRequest:
		e = oauthError{"invalid_grant", "Invalid JWT Signature."}
	case http.StatusUnauthorized:
		e = oauthError{"invalid_client", "The OAuth client was not found."}
	case http.StatusForbidden:
		e = oauthError{"access_denied", "The service account is disabled."}
	case http.StatusTooManyRequests:
		e = oauthError{"rate_limit_exceeded", "Rate limit exceeded."}
	case http.StatusServiceUnavailable:
		e = oauthError{"temporarily_unavailable", "The service is currently unavailable."}
	}
	writeJSON(w, code, e)
}
