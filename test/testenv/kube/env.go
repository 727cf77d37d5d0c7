// Package kube runs a real Kubernetes API server for tests: etcd and kube-apiserver built from
// the Go module proxy by the tools module tools/kube (see EnsureBinaries), started on free
// loopback ports in the test's temporary directory, and killed when the test ends.
//
// The API server authenticates bearer tokens only: the admin (group system:masters) comes from
// a token file, and any number of extra identities can be minted at any time with AddUser
// (they are answered by a token-review webhook served from the test process, so no restart is
// needed). Authorization is RBAC. An audit log records every request, so tests can count what a
// client really sent (AuditEvents, CountRequests).
//
// Without kube-controller-manager there are no default ServiceAccounts, so the ServiceAccount
// admission plugin is off: Pods can be created directly.
package kube

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/toolbuild"
)

// AdminUser is the name of the identity behind AdminConfig and Kubeconfig.
const AdminUser = "admin"

// How long each stage may take before Start gives up. Generous: the machines that run the
// tests are small and shared.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiserverReadyTimeout = 120 * time.Second
	startAttempts         = 3
)

// Env is a running etcd + kube-apiserver pair.
type Env struct {
	// AdminConfig is a client configuration for the admin identity (group system:masters),
	// with a high client-side rate limit (1000/s) so tests can create objects in bulk.
	AdminConfig *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the admin identity, usable by kubectl.
	// Its context is named "admin@testenv".
	Kubeconfig string
	// URL is the API server's address, https://127.0.0.1:PORT. It stays the same across
	// Stop and Restart.
	URL string
	// CAData is the PEM certificate of the CA that signed the API server's serving certificate.
	CAData []byte
	// Dir holds the environment's files: etcd data, logs (etcd.log, kube-apiserver.log),
	// audit.log, certificates and kubeconfigs.
	Dir string

	apiserverPath string
	apiserverArgs []string
	etcdURL       string
	auditPath     string
	adminToken    string

	mu        sync.Mutex
	etcd      *process
	apiserver *process
	users     map[string]identity // by name
	byToken   map[string]identity
	// accept are the token authorities of AcceptTokens, asked in order for a token byToken
	// does not hold.
	accept  []func(token string) (user string, ok bool)
	webhook *http.Server

	barrierSeq atomic.Int64
	barrierID  string
}

type identity struct {
	name   string
	token  string
	groups []string
}

// Option changes how Start runs the environment.
type Option func(*options)

type options struct {
	apiserverFlags []string
}

// WithAPIServerFlags appends flags to the kube-apiserver command line (a later flag overrides
// an earlier one of the same name).
func WithAPIServerFlags(flags ...string) Option {
	return func(o *options) { o.apiserverFlags = append(o.apiserverFlags, flags...) }
}

// Start builds the binaries if needed (see EnsureBinaries), starts etcd and kube-apiserver and
// waits until the API server is ready and the default and kube-system namespaces exist. Both
// processes are killed when the test ends, and with the test process if it dies. When this
// machine cannot build the binaries (no Go, no module proxy), the test ends through
// testenv.Unavailable; any other failure fails it. Under -short it skips the test.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}

	// Progress goes to stderr as well: go test shows a test's log only when it ends, and
	// the first build takes minutes.
	logf := func(format string, args ...any) {
		t.Logf(format, args...)
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
	apiserverPath, etcdPath := requireBinaries(t, logf)

	e := &Env{
		Dir:           t.TempDir(),
		apiserverPath: apiserverPath,
		users:         map[string]identity{},
		byToken:       map[string]identity{},
		barrierID:     newToken()[:8],
	}
	t.Cleanup(func() { e.close(t) })

	start := time.Now()
	if err := e.start(t, etcdPath, o); err != nil {
		t.Fatalf("start the Kubernetes test environment: %v", err)
	}
	t.Logf("kube: etcd and kube-apiserver ready at %s in %s", e.URL, time.Since(start).Round(time.Millisecond))
	return e
}

// requireBinaries returns the paths of kube-apiserver and etcd, building them first if needed
// (EnsureBinaries). It ends the test through testenv.Unavailable when this machine cannot build
// them (no Go, no module proxy), and fails it on any other error, a compile error or a build cut
// short by the test's timeout included. Under -short it skips the test: every caller starts them.
func requireBinaries(t testing.TB, logf func(format string, args ...any)) (apiserver, etcd string) {
	t.Helper()
	testenv.SkipIfShort(t, "starts etcd and kube-apiserver")
	buildCtx, cancel := toolbuild.BuildContext(t)
	defer cancel()
	apiserver, etcd, err := EnsureBinaries(buildCtx, logf)
	switch {
	case errors.Is(err, toolbuild.ErrNotBuilt):
		testenv.Unavailable(t, "%v", err)
	case errors.Is(err, ErrNoGo), errors.Is(err, ErrNoModuleProxy):
		testenv.Unavailable(t, "kube-apiserver and etcd cannot be built here: %v. "+
			"Building them needs Go and the Go module proxy (once; several minutes on two cores, "+
			"or run scripts/build-kube.sh beforehand)", err)
	case err != nil:
		t.Fatalf("kube-apiserver and etcd: %v. A first run builds them, which takes several minutes "+
			"on two cores: give it a longer -timeout (e.g. -timeout 30m) or run scripts/build-kube.sh first", err)
	}
	return apiserver, etcd
}

func (e *Env) start(t testing.TB, etcdPath string, o options) error {
	pki, err := newServingPKI()
	if err != nil {
		return err
	}
	e.CAData = pki.caPEM
	files := map[string][]byte{
		"serving.crt":        pki.certPEM,
		"serving.key":        pki.keyPEM,
		"audit-policy.yaml":  []byte(auditPolicy),
		"etcd.log":           nil,
		"kube-apiserver.log": nil,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(e.Dir, name), content, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if err := writeServiceAccountKey(filepath.Join(e.Dir, "service-account.key")); err != nil {
		return err
	}
	e.adminToken = newToken()
	tokenFile := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", e.adminToken, AdminUser, AdminUser)
	if err := os.WriteFile(filepath.Join(e.Dir, "tokens.csv"), []byte(tokenFile), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	webhookURL, err := e.startWebhook()
	if err != nil {
		return err
	}
	webhookConfig := filepath.Join(e.Dir, "authn-webhook.kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"authn": {Server: webhookURL}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"kube-apiserver": {}},
		Contexts:       map[string]*clientcmdapi.Context{"authn": {Cluster: "authn", AuthInfo: "kube-apiserver"}},
		CurrentContext: "authn",
	}, webhookConfig); err != nil {
		return fmt.Errorf("write token webhook config: %w", err)
	}
	e.auditPath = filepath.Join(e.Dir, "audit.log")

	// A free port found by listening on :0 may be taken by someone else before the daemon
	// binds it; retry the whole start with new ports when that happens.
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		ports, err := freePorts(3)
		if err != nil {
			return err
		}
		clientPort, peerPort, apiPort := ports[0], ports[1], ports[2]
		if err := e.startEtcd(etcdPath, clientPort, peerPort, attempt); err != nil {
			lastErr = err
			if isAddrInUse(err) {
				t.Logf("kube: etcd port taken, retrying: %v", err)
				continue
			}
			return err
		}
		e.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
		e.apiserverArgs = append([]string{
			"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(clientPort),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(apiPort),
			"--tls-cert-file=" + filepath.Join(e.Dir, "serving.crt"),
			"--tls-private-key-file=" + filepath.Join(e.Dir, "serving.key"),
			"--cert-dir=" + filepath.Join(e.Dir, "certs"),
			"--token-auth-file=" + filepath.Join(e.Dir, "tokens.csv"),
			"--authentication-token-webhook-config-file=" + webhookConfig,
			"--authentication-token-webhook-version=v1",
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + filepath.Join(e.Dir, "service-account.key"),
			"--service-account-signing-key-file=" + filepath.Join(e.Dir, "service-account.key"),
			"--disable-admission-plugins=ServiceAccount",
			// Nothing ever connects to a Service address here; the range only has to be valid.
			"--service-cluster-ip-range=10.96.0.0/16",
			// The reconciler would publish 127.0.0.1 as the kubernetes Service's endpoint,
			// which validation rejects (loopback), and log about it forever.
			"--endpoint-reconciler-type=none",
			"--audit-policy-file=" + filepath.Join(e.Dir, "audit-policy.yaml"),
			"--audit-log-path=" + e.auditPath,
			"--audit-log-mode=blocking",
			"--profiling=false",
		}, o.apiserverFlags...)
		err = e.startAPIServer()
		if err == nil {
			lastErr = nil
			break
		}
		lastErr = err
		_ = e.etcd.Kill(killTimeout)
		if !isAddrInUse(err) {
			return err
		}
		t.Logf("kube: kube-apiserver port taken, retrying: %v", err)
	}
	if lastErr != nil {
		return lastErr
	}

	e.AdminConfig = e.configFor(e.adminToken)
	e.Kubeconfig = filepath.Join(e.Dir, "admin.kubeconfig")
	if err := e.writeKubeconfig(e.Kubeconfig, AdminUser+"@testenv", e.adminToken); err != nil {
		return err
	}
	return e.waitNamespaces()
}

func (e *Env) startEtcd(etcdPath string, clientPort, peerPort, attempt int) error {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(e.Dir, "etcd-"+strconv.Itoa(attempt)),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=testenv=" + peer,
		// The data is thrown away with the test: durability buys nothing and costs seconds.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	p, err := startProcess("etcd", etcdPath, args, filepath.Join(e.Dir, "etcd.log"))
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.etcd, e.etcdURL = p, client
	e.mu.Unlock()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(etcdReadyTimeout)
	for {
		if p.Exited() {
			return fmt.Errorf("etcd exited at start (%v):\n%s", p.WaitErr(), p.LogTail(20))
		}
		resp, err := hc.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			_ = p.Kill(killTimeout)
			return fmt.Errorf("etcd not healthy %s after start:\n%s", etcdReadyTimeout, p.LogTail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *Env) startAPIServer() error {
	p, err := startProcess("kube-apiserver", e.apiserverPath, e.apiserverArgs, filepath.Join(e.Dir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.apiserver = p
	e.mu.Unlock()

	hc := e.httpClient(5 * time.Second)
	deadline := time.Now().Add(apiserverReadyTimeout)
	for {
		if p.Exited() {
			return fmt.Errorf("kube-apiserver exited at start (%v):\n%s", p.WaitErr(), p.LogTail(30))
		}
		req, _ := http.NewRequest(http.MethodGet, e.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+e.adminToken)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			_ = p.Kill(killTimeout)
			return fmt.Errorf("kube-apiserver not ready %s after start:\n%s", apiserverReadyTimeout, p.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitNamespaces waits for the namespaces a controller creates shortly after the API server
// is ready, so tests can rely on them.
func (e *Env) waitNamespaces() error {
	hc := e.httpClient(5 * time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for _, ns := range []string{"default", "kube-system"} {
		for {
			req, _ := http.NewRequest(http.MethodGet, e.URL+"/api/v1/namespaces/"+ns, nil)
			req.Header.Set("Authorization", "Bearer "+e.adminToken)
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("namespace %s not created within 60s of the API server being ready", ns)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (e *Env) httpClient(timeout time.Duration) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CAData)
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
}

// Stop kills the API server (etcd keeps running), so clients see connection refused at URL.
// Restart brings it back at the same address.
func (e *Env) Stop() error {
	e.mu.Lock()
	p := e.apiserver
	e.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Kill(killTimeout)
}

// Restart stops the API server if it runs, starts it again at the same address with the same
// identities and waits until it is ready. State lives in etcd, so objects survive.
func (e *Env) Restart() error {
	if err := e.Stop(); err != nil {
		return err
	}
	return e.startAPIServer()
}

// AddUser mints a bearer token for a new identity named name, member of groups (plus
// system:authenticated), and returns it. It takes effect at once; RBAC decides what the
// identity may do. Adding an existing name returns its token (and keeps its groups).
func (e *Env) AddUser(name string, groups ...string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if id, ok := e.users[name]; ok {
		return id.token
	}
	id := identity{name: name, token: newToken(), groups: append([]string(nil), groups...)}
	e.users[name] = id
	e.byToken[id.token] = id
	return id.token
}

// AcceptTokens makes the API server accept the tokens authority vouches for, as the user it
// names (member of system:authenticated only), the way GKE's token webhook accepts Google
// OAuth access tokens as their account's email: e.g. AcceptTokens(gce.TokenInfo). It takes
// effect at once; RBAC decides what such a user may do.
func (e *Env) AcceptTokens(authority func(token string) (user string, ok bool)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.accept = append(e.accept, authority)
}

// ConfigFor returns a client configuration for a user added with AddUser, or for AdminUser.
func (e *Env) ConfigFor(user string) *rest.Config {
	return e.configFor(e.tokenOf(user))
}

// KubeconfigFor writes a kubeconfig file for a user added with AddUser (or AdminUser) and
// returns its path. Its context is named "<user>@testenv".
func (e *Env) KubeconfigFor(user string) string {
	return e.KubeconfigWithToken(user, e.tokenOf(user))
}

// KubeconfigWithToken writes a kubeconfig file that presents token (any string, e.g. one the
// API server does not know) and returns its path. Its context is named "<name>@testenv".
func (e *Env) KubeconfigWithToken(name, token string) string {
	path := filepath.Join(e.Dir, name+".kubeconfig")
	if err := e.writeKubeconfig(path, name+"@testenv", token); err != nil {
		panic(err) // a write into the test's own temporary directory
	}
	return path
}

func (e *Env) tokenOf(user string) string {
	if user == AdminUser {
		return e.adminToken
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	id, ok := e.users[user]
	if !ok {
		panic(fmt.Sprintf("kube: unknown user %q: add it with AddUser first", user))
	}
	return id.token
}

func (e *Env) configFor(token string) *rest.Config {
	return &rest.Config{
		Host:            e.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAData},
		// Tests create objects by the thousand; client-go's default limit (5/s) would make
		// that take minutes.
		QPS:   1000,
		Burst: 2000,
	}
}

func (e *Env) writeKubeconfig(path, contextName, token string) error {
	user := strings.TrimSuffix(contextName, "@testenv")
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"testenv": {Server: e.URL, CertificateAuthorityData: e.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{contextName: {Cluster: "testenv", AuthInfo: user}},
		CurrentContext: contextName,
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func (e *Env) close(t testing.TB) {
	e.mu.Lock()
	procs := []*process{e.apiserver, e.etcd}
	webhook := e.webhook
	e.mu.Unlock()
	if t.Failed() {
		for _, p := range procs {
			if p != nil {
				t.Logf("kube: last lines of %s (%s):\n%s", p.Name, p.LogPath, p.LogTail(30))
			}
		}
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		if err := p.Kill(killTimeout); err != nil {
			t.Errorf("kube: %v", err)
		}
	}
	if webhook != nil {
		_ = webhook.Close()
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}
