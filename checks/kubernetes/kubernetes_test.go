package kubernetes

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

const managedBy = "app.kubernetes.io/managed-by=proxy-operator"

func provider(name, kubeconfig, context string, mod ...func(*Config)) config.Provider {
	kc := &Config{Kubeconfig: kubeconfig, Context: context, Version: "v1", Resource: "pods", LabelSelector: managedBy}
	for _, m := range mod {
		m(kc)
	}
	return config.Provider{Name: name, Type: "kubernetes", Block: kc}
}

func newChecker(t *testing.T, p config.Provider, logger *slog.Logger) *Checker {
	t.Helper()
	c, err := New(p, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.(*Checker).Close() })
	return c.(*Checker)
}

// checkOnce runs one check and asserts the result's shape (one target, named as Targets says,
// Up exactly when Ready, a reason from the catalogue).
func checkOnce(t *testing.T, c checks.Checker, ctx context.Context) checks.TargetResult {
	t.Helper()
	results := c.Check(ctx)
	if len(results) != 1 {
		t.Fatalf("Check returned %d results, want 1", len(results))
	}
	r := results[0]
	if targets := c.Targets(); len(targets) != 1 || targets[0] != r.Target {
		t.Errorf("result target %q, Targets() = %q", r.Target, targets)
	}
	if r.Up != (r.Reason == checks.ReasonReady) {
		t.Errorf("Up = %v with reason %s", r.Up, r.Reason)
	}
	if !checks.ValidReason(Type, r.Reason) {
		t.Errorf("reason %q is not in the kubernetes catalogue", r.Reason)
	}
	if r.CheckedAt.IsZero() || r.Duration < 0 {
		t.Errorf("CheckedAt %v, Duration %v", r.CheckedAt, r.Duration)
	}
	return r
}

func writeKubeconfig(t *testing.T, server string, caData []byte, contextName, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: server, CertificateAuthorityData: caData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{contextName: {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: contextName,
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNewRejectsOtherTypes(t *testing.T) {
	_, err := New(config.Provider{Name: "g", Type: "other", Block: &otherBlock{}}, nil)
	if err == nil {
		t.Fatal("New accepted a provider of another type")
	}
	_, err = New(config.Provider{Name: "k", Type: "kubernetes"}, nil)
	if err == nil {
		t.Fatal("New accepted a kubernetes provider without its block")
	}
}

// A configuration that cannot be used never fails New: every check reports ConfigError.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("this: [is not: a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := writeKubeconfig(t, "https://127.0.0.1:1", nil, "ctx-a", "secret-token-value")
	missingCert := filepath.Join(dir, "missing-cert")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: "https://127.0.0.1:1"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {ClientCertificate: filepath.Join(dir, "nope.crt"), ClientKey: filepath.Join(dir, "nope.key")}},
		Contexts:       map[string]*clientcmdapi.Context{"ctx-b": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "ctx-b",
	}, missingCert); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	for _, tc := range []struct {
		name       string
		p          config.Provider
		wantTarget string
		wantInMsg  string
	}{
		{"missing file", provider("p1", filepath.Join(dir, "absent"), ""), "p1", "absent"},
		{"missing file with context", provider("p2", filepath.Join(dir, "absent"), "prod"), "prod", "absent"},
		{"not a kubeconfig", provider("p3", garbage, ""), "p3", "garbage"},
		{"unknown context", provider("p4", good, "nope"), "nope", `context was not found for specified context: nope`},
		{"missing client certificate", provider("p5", missingCert, ""), "ctx-b", "nope.crt"},
		{"bad label selector", provider("p6", good, "", func(kc *Config) { kc.LabelSelector = "a in (" }), "ctx-a", "invalid labelSelector"},
		{"no kubeconfig outside a cluster", provider("p7", "", ""), "p7", "in-cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(t, tc.p, nil)
			for range 2 { // every check, not only the first
				r := checkOnce(t, c, context.Background())
				if r.Reason != ReasonConfigError || r.Up {
					t.Fatalf("reason %s, want ConfigError (message %q)", r.Reason, r.Message)
				}
				if r.Target != tc.wantTarget {
					t.Errorf("target %q, want %q", r.Target, tc.wantTarget)
				}
				if !strings.Contains(r.Message, tc.wantInMsg) {
					t.Errorf("message %q does not mention %q", r.Message, tc.wantInMsg)
				}
				if strings.Contains(r.Message, "secret-token-value") {
					t.Errorf("message %q holds the token", r.Message)
				}
			}
		})
	}
}

// TestPlainHTTPWithCredentialsRefused: a kubeconfig whose server is plain http to a host that
// is not loopback, with a user that has a token: ConfigError naming the kubeconfig, the
// cluster's server field and why (client-go would drop the token and check anonymously; the
// token must not travel in clear), and no request. Loopback and a user without credentials are
// allowed.
func TestPlainHTTPWithCredentialsRefused(t *testing.T) {
	remote := writeKubeconfig(t, "http://198.18.0.1:8080", nil, "ctx-remote", "secret-token-value")
	r := checkOnce(t, newChecker(t, provider("p", remote, ""), nil), context.Background())
	if r.Reason != ReasonConfigError || !strings.Contains(r.Message, remote) || !strings.Contains(r.Message, "clusters[].cluster.server") ||
		!strings.Contains(r.Message, `"198.18.0.1:8080"`) || !strings.Contains(r.Message, "must not travel in clear") {
		t.Errorf("plain http with a token: %s (%q), want ConfigError naming the file, the server field and why", r.Reason, r.Message)
	}
	if strings.Contains(r.Message, "secret-token-value") {
		t.Errorf("message %q holds the token", r.Message)
	}

	// Allowed: the check gets past its configuration to the request, which a context already
	// done keeps from being made (Timeout).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, p := range map[string]config.Provider{
		"loopback":       provider("p", writeKubeconfig(t, "http://127.0.0.1:1", nil, "ctx", "secret-token-value"), ""),
		"no credentials": provider("p", writeKubeconfig(t, "http://198.18.0.1:8080", nil, "ctx", ""), ""),
	} {
		if r := checkOnce(t, newChecker(t, p, nil), ctx); r.Reason != checks.ReasonTimeout {
			t.Errorf("%s: %s (%q), want the check to reach its request (Timeout: the context is done)", name, r.Reason, r.Message)
		}
	}
}

func TestTargetNamedAfterCurrentContext(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1", nil, "prod-eu", "t")
	if got := newChecker(t, provider("p", kc, ""), nil).Targets(); len(got) != 1 || got[0] != "prod-eu" {
		t.Errorf("Targets() = %q, want [prod-eu]", got)
	}
}

func TestStale(t *testing.T) {
	path := writeKubeconfig(t, "https://127.0.0.1:1", nil, "ctx", "token-abcdef")
	c := newChecker(t, provider("p", path, ""), nil)
	if c.Stale() {
		t.Fatal("a checker just built from a readable kubeconfig is stale")
	}
	// A rewritten kubeconfig (say, a rotated token): same size, later modification time.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte("token-abcdef"), []byte("token-ghijkl"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if !c.Stale() {
		t.Error("the kubeconfig changed but the checker is not stale")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !c.Stale() {
		t.Error("the kubeconfig is gone but the checker is not stale")
	}
	// A checker in ConfigError is always worth rebuilding.
	broken := newChecker(t, provider("p", filepath.Join(t.TempDir(), "absent"), ""), nil)
	if !broken.Stale() {
		t.Error("a ConfigError checker is not stale")
	}
}

// fakeServer answers every request with status and body, and counts requests.
func fakeServer(t *testing.T, status int, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS failures are expected here
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &n
}

// serverCA is the fake server's self-signed certificate, which is its own CA.
func serverCA(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// Server answers the real API server cannot be made to give on demand, from a fake one.
func TestServerAnswersFromAFake(t *testing.T) {
	status := func(code int, reason string) string {
		return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"fake says %d","reason":%q,"code":%d}`, code, reason, code)
	}
	for _, tc := range []struct {
		code int
		body string
		want checks.Reason
	}{
		{200, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"continue":"x"},"items":[{"metadata":{"name":"a"}}]}`, checks.ReasonReady},
		{500, status(500, "InternalError"), checks.ReasonAPIError},
		{503, `<html>service unavailable</html>`, checks.ReasonAPIError},
		{429, status(429, "TooManyRequests"), checks.ReasonAPIError},
		{401, status(401, "Unauthorized"), checks.ReasonUnauthorized},
		{403, status(403, "Forbidden"), checks.ReasonForbidden},
		{404, `404 page not found`, ReasonResourceNotFound},
		{200, `not json`, checks.ReasonAPIError},
	} {
		t.Run(fmt.Sprintf("%d-%s", tc.code, tc.want), func(t *testing.T) {
			srv, n := fakeServer(t, tc.code, tc.body)
			c := newChecker(t, provider("fake", writeKubeconfig(t, srv.URL, serverCA(srv), "fake", "tok-123456"), ""), nil)
			r := checkOnce(t, c, context.Background())
			if r.Reason != tc.want {
				t.Errorf("reason %s (%q), want %s", r.Reason, r.Message, tc.want)
			}
			if got := n.Load(); got != 1 {
				t.Errorf("%d requests, want exactly 1 (no retry)", got)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	refused := newChecker(t, provider("p", writeKubeconfig(t, "https://"+addr, nil, "refused", "t"), ""), nil)
	if r := checkOnce(t, refused, context.Background()); r.Reason != checks.ReasonAPIUnreachable {
		t.Errorf("refused: reason %s (%q), want APIUnreachable", r.Reason, r.Message)
	}

	// A server whose certificate no CA the kubeconfig trusts signed (none given: the
	// system's roots).
	srv, n := fakeServer(t, 200, `{}`)
	wrongCA := newChecker(t, provider("p", writeKubeconfig(t, srv.URL, nil, "wrong-ca", "token-abcdef"), ""), nil)
	r := checkOnce(t, wrongCA, context.Background())
	if r.Reason != checks.ReasonAPIUnreachable || !strings.Contains(r.Message, "certificate") {
		t.Errorf("wrong CA: reason %s (%q), want APIUnreachable about the certificate", r.Reason, r.Message)
	}
	if n.Load() != 0 {
		t.Errorf("a request reached the server despite the TLS failure")
	}
}

func TestNoRequestWhenContextDone(t *testing.T) {
	srv, n := fakeServer(t, 200, `{"items":[]}`)
	c := newChecker(t, provider("p", writeKubeconfig(t, srv.URL, serverCA(srv), "c", "t"), ""), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := checkOnce(t, c, ctx)
	if r.Reason != checks.ReasonTimeout {
		t.Errorf("reason %s, want Timeout", r.Reason)
	}
	if n.Load() != 0 {
		t.Errorf("%d requests with a done context, want 0", n.Load())
	}
}

func TestClassify(t *testing.T) {
	what := "pods (v1) in all namespaces"
	gr := schema.GroupResource{Resource: "pods"}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want checks.Reason
	}{
		{"deadline", context.Background(), &url.Error{Op: "Get", URL: "u", Err: context.DeadlineExceeded}, checks.ReasonTimeout},
		{"context done", done, errors.New("anything"), checks.ReasonTimeout},
		{"401", context.Background(), apierrors.NewUnauthorized("no"), checks.ReasonUnauthorized},
		{"403", context.Background(), apierrors.NewForbidden(gr, "", errors.New("no")), checks.ReasonForbidden},
		{"404", context.Background(), apierrors.NewNotFound(gr, ""), ReasonResourceNotFound},
		{"500", context.Background(), apierrors.NewInternalError(errors.New("boom")), checks.ReasonAPIError},
		{"504 from the server", context.Background(), apierrors.NewTimeoutError("slow", 1), checks.ReasonAPIError},
		{"refused", context.Background(), &url.Error{Op: "Get", URL: "u", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, checks.ReasonAPIUnreachable},
		{"dns", context.Background(), &url.Error{Op: "Get", URL: "u", Err: &net.DNSError{Err: "no such host", Name: "x"}}, checks.ReasonAPIUnreachable},
		{"tls record", context.Background(), &url.Error{Op: "Get", URL: "u", Err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}}, checks.ReasonAPIUnreachable},
		{"eof", context.Background(), &url.Error{Op: "Get", URL: "u", Err: io.EOF}, checks.ReasonAPIUnreachable},
		{"exec plugin", context.Background(), &url.Error{Op: "Get", URL: "u", Err: errors.New("getting credentials: exec: executable foo not found")}, ReasonConfigError},
		{"other", context.Background(), errors.New("odd"), checks.ReasonAPIError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := classify(tc.ctx, tc.err, what)
			if got != tc.want {
				t.Errorf("classify(%v) = %s, want %s", tc.err, got, tc.want)
			}
			if !strings.Contains(msg, what) {
				t.Errorf("message %q does not say what was listed", msg)
			}
		})
	}
}

// otherBlock is a block of another provider type.
type otherBlock struct{}

func (*otherBlock) Equal(config.Block) bool  { return false }
func (*otherBlock) Files() []config.File     { return nil }
func (*otherBlock) Warnings(string) []string { return nil }

// TestSpecialKubeconfigFiles: a kubeconfig, or a token file or CA file it names, that is a
// named pipe or /dev/zero is refused at once (ConfigError naming the file and what it is),
// never waited on or read without end; a kubeconfig over the size limit is refused by size.
func TestSpecialKubeconfigFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	naming := func(name string, user *clientcmdapi.AuthInfo, cluster *clientcmdapi.Cluster) string {
		path := filepath.Join(dir, name)
		if err := clientcmd.WriteToFile(clientcmdapi.Config{
			Clusters:       map[string]*clientcmdapi.Cluster{"c": cluster},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": user},
			Contexts:       map[string]*clientcmdapi.Context{"ctx": {Cluster: "c", AuthInfo: "u"}},
			CurrentContext: "ctx",
		}, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	server := &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		name, kubeconfig, want string
	}{
		{"kubeconfig fifo", fifo, fifo + " is a named pipe (FIFO), not a regular file"},
		{"kubeconfig /dev/zero", zero, zero + " is a character device, not a regular file"},
		{"kubeconfig too large", big, big + " is 2MiB, larger than the limit of 1MiB"},
		{"token file fifo", naming("token-fifo", &clientcmdapi.AuthInfo{TokenFile: fifo}, server), "tokenFile: " + fifo + " is a named pipe (FIFO)"},
		{"token file /dev/zero", naming("token-zero", &clientcmdapi.AuthInfo{TokenFile: "zero"}, server), "tokenFile: " + zero + " is a character device"},
		{"CA fifo", naming("ca-fifo", &clientcmdapi.AuthInfo{Token: "abcdefgh"}, &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthority: fifo}),
			"certificate-authority: " + fifo + " is a named pipe (FIFO)"},
		{"client key /dev/zero", naming("key-zero", &clientcmdapi.AuthInfo{ClientCertificateData: []byte("x"), ClientKey: zero}, server),
			"client-key: " + zero + " is a character device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan checks.TargetResult, 1)
			go func() {
				c := newChecker(t, provider("p", tc.kubeconfig, ""), nil)
				done <- c.Check(context.Background())[0]
			}()
			var r checks.TargetResult
			select {
			case r = <-done:
			case <-time.After(time.Minute):
				t.Fatal("building and checking did not return: a read blocked")
			}
			if r.Reason != ReasonConfigError || !strings.Contains(r.Message, tc.want) {
				t.Errorf("%s %q; want ConfigError saying %q", r.Reason, r.Message, tc.want)
			}
		})
	}
}

// TestTokenFileReadInlineAndRotated: a kubeconfig's tokenFile (relative to the kubeconfig) is
// read by the checker, sent as the bearer token, redacted from every message, and read again
// at the next check once it changed.
func TestTokenFileReadInlineAndRotated(t *testing.T) {
	var got atomic.Value
	got.Store("")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[]}`)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("first-token-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", certificate-authority: ca.crt}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newChecker(t, provider("p", kubeconfig, ""), nil)
	if r := checkOnce(t, c, context.Background()); r.Reason != checks.ReasonReady || got.Load() != "Bearer first-token-value" {
		t.Fatalf("%s %q, Authorization %q; want Ready with the token file's token", r.Reason, r.Message, got.Load())
	}
	checks.RefreshSecrets()
	if s := checks.Sanitize("said first-token-value"); strings.Contains(s, "first-token-value") {
		t.Errorf("the token file's token is not redacted: %q", s)
	}
	// A new version of the file (another size, so its state differs at any clock resolution).
	if err := os.WriteFile(token, []byte("second-token-value-rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := checkOnce(t, c, context.Background()); r.Reason != checks.ReasonReady || got.Load() != "Bearer second-token-value-rotated" {
		t.Errorf("after the rotation: %s %q, Authorization %q; want the new token", r.Reason, r.Message, got.Load())
	}
}
