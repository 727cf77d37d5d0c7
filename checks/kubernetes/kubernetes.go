// Package kubernetes implements the check of a `type: kubernetes` provider: one LIST request
// for at most one object of a configured resource (default: pods in all namespaces, with the
// platform's managed-by label), which proves in one small round trip that the API server
// answers and that the exporter's identity may list what the platform needs.
//
// The kubeconfig is read when the checker is built, and again at the first check after the
// file changed (a rotated Secret: checks.FileState), like every credential file of every
// provider type. A problem with it does not stop the exporter: the checker then reports
// ConfigError on every check, with a message that says what is wrong, until the file is fixed.
package kubernetes

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// Type is the providers file's name of the type: `type: kubernetes`.
const Type checks.ProviderType = "kubernetes"

// The reasons only the kubernetes type reports (its catalogue, block.go, also lists the shared
// ones).
const (
	ReasonResourceNotFound checks.Reason = "ResourceNotFound"
	ReasonConfigError      checks.Reason = "ConfigError"
)

// userAgent names the exporter in the API server's logs and audit events.
const userAgent = "provider-health-exporter"

// acceptMetadata asks for metadata only (PartialObjectMetadataList), so the response stays
// small whatever the resource; a server that cannot convert answers with plain JSON.
const acceptMetadata = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// inClusterTokenFile is where the kubelet mounts the pod's service-account token (client-go's
// rest.InClusterConfig reads it).
const inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// minSecretLen is the length from which a credential is redacted from messages.
const minSecretLen = 6

// Checker checks one kubernetes provider. It has exactly one target.
type Checker struct {
	name   string
	target string
	logger *slog.Logger

	gvr       schema.GroupVersionResource
	namespace string
	selector  string
	what      string // "pods in all namespaces", for messages

	block Config

	// closing cuts the checks in progress when the checker is closed.
	closing checks.Closing

	// mu guards state, which a check replaces when the kubeconfig changed; it is never held
	// while the files are read (reads shares the one read of concurrent callers).
	mu    sync.Mutex
	state *clientState
	reads singleflight.Group
}

// clientState is what the checker built from one read of its configuration.
type clientState struct {
	// err is set when the configuration could not be turned into a client; every check then
	// reports ConfigError with it.
	err     error
	client  *rest.RESTClient
	http    *http.Client
	secrets []string // never shown in messages
	// files are the kubeconfig and the files it names (token, certificates, key), each with
	// its state when it was read (none in-cluster).
	files []fileAt
}

// fileAt is a file and its state when it was read.
type fileAt struct {
	path string
	at   checks.FileState
}

// changed reports whether a file the state was built from changed since it was read.
func (st *clientState) changed() bool {
	for _, f := range st.files {
		if f.at.Changed(f.path) {
			return true
		}
	}
	return false
}

var (
	_ checks.Checker      = (*Checker)(nil)
	_ checks.TargetProber = (*Checker)(nil)
)

// New builds the checker of a kubernetes provider; logger is expected to be scoped to the
// provider already. It reads the kubeconfig (or the in-cluster configuration when none is
// given) now, but contacts no server. It returns an error only when p is not a kubernetes
// provider; a kubeconfig that cannot be read or used makes a checker that reports ConfigError.
func New(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	kcp, ok := p.Block.(*Config)
	if !ok {
		return nil, fmt.Errorf("provider %q is not a kubernetes provider (type %q)", p.Name, p.Type)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	kc := *kcp
	c := &Checker{
		name:      p.Name,
		logger:    logger,
		namespace: kc.Namespace,
		selector:  kc.LabelSelector,
	}
	c.gvr = schema.GroupVersionResource{Group: kc.Group, Version: kc.Version, Resource: kc.Resource}
	if c.gvr.Version == "" {
		c.gvr.Version = DefaultVersion
	}
	if c.gvr.Resource == "" {
		c.gvr.Resource = DefaultResource
	}
	c.what = describe(c.gvr, c.namespace)

	c.block = kc
	if kc.Kubeconfig == "" {
		// The in-cluster service account's token is as secret as a kubeconfig.
		checks.WatchSecretFiles(inClusterTokenFile)
	}
	c.state = c.load()
	return c, nil
}

// load reads the configuration and builds a client from it. The first load names the target;
// a later one whose kubeconfig names another target is a ConfigError until a reload renames it.
func (c *Checker) load() *clientState {
	st := &clientState{}
	restConfig, target, err := loadConfig(c.block, func(path string) ([]byte, error) {
		// Taken before reading, so that a change during the read still counts as one.
		at, _ := checks.StatFile(path)
		st.files = append(st.files, fileAt{path, at})
		return fileread.Read(path, fileread.CredentialLimit)
	})
	switch {
	case c.target == "":
		c.target = cmp.Or(target, c.name)
	case err == nil && target != "" && target != c.target:
		err = fmt.Errorf("the kubeconfig now names the target %q, not %q: reload the exporter (SIGHUP or /-/reload) to check it", target, c.target)
	}
	if err == nil {
		if _, perr := labels.Parse(c.selector); perr != nil {
			err = fmt.Errorf("invalid labelSelector %q: %w", c.selector, perr)
		}
	}
	if err == nil {
		err = st.build(restConfig)
	}
	if err != nil {
		st.err = err
		c.logger.Warn("kubernetes provider configuration unusable; every check reports ConfigError until it is fixed",
			"target", c.target, "err", checks.Sanitize(st.redact(err.Error())))
	}
	return st
}

// current returns the client state, reading the kubeconfig (and the files it names) again
// first when one changed since it was read. The files are read outside the mutex, once for
// concurrent callers; the mutex is taken only to swap the state.
func (c *Checker) current() *clientState {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if c.block.Kubeconfig == "" || !st.changed() {
		return st
	}
	v, _, _ := c.reads.Do("", func() (any, error) {
		next := c.load()
		c.mu.Lock()
		old := c.state
		c.state = next
		c.mu.Unlock()
		if next.err == nil {
			c.logger.Info("kubeconfig changed; read again", "kubeconfig", c.block.Kubeconfig)
		}
		if old.http != nil {
			utilnet.CloseIdleConnectionsFor(old.http.Transport)
		}
		return next, nil
	})
	return v.(*clientState)
}

// loadConfig turns the provider's block into a client configuration and names the target: the
// kubeconfig context in use, or the API server's host when there is none (in-cluster). The
// kubeconfig and the files its context names (tokenFile, certificate-authority, client-certificate,
// client-key) are read through read, which reads regular files only, size-capped, with a
// deadline; their contents are handed to client-go inline, so that client-go opens none of them.
func loadConfig(kc Config, read func(string) ([]byte, error)) (*rest.Config, string, error) {
	if kc.Kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("no kubeconfig configured and no in-cluster configuration: %w", err)
		}
		return cfg, hostOf(cfg.Host), nil
	}
	data, err := read(kc.Kubeconfig)
	if err != nil {
		return nil, kc.Context, fmt.Errorf("read kubeconfig: %w", err)
	}
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, kc.Context, fmt.Errorf("read kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	contextName := kc.Context
	if contextName == "" {
		contextName = raw.CurrentContext
	}
	if kc.Auth == AuthGoogle {
		// The kubeconfig names the cluster only: its user (on GKE, the exec plugin
		// gke-gcloud-auth-plugin, which the image does not have) is not used.
		if ctx := raw.Contexts[contextName]; ctx != nil && raw.AuthInfos[ctx.AuthInfo] != nil {
			raw.AuthInfos[ctx.AuthInfo] = clientcmdapi.NewAuthInfo()
		}
	}
	if err := inlineFiles(raw, contextName, kc.Kubeconfig, read); err != nil {
		return nil, contextName, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	// No config access: the exporter never writes into the kubeconfig.
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, contextName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, contextName, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	if err := plainHTTPWithCredentials(raw, contextName, cfg); err != nil {
		return nil, contextName, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	if kc.Auth == AuthGoogle {
		if u, _, err := rest.DefaultServerUrlFor(cfg); err == nil && u.Scheme == "http" && !config.LoopbackHost(u.Hostname()) {
			return nil, contextName, fmt.Errorf("kubeconfig %s: the server %q is plain http: with auth: google the access token must not travel in clear (allowed: https, or http to localhost or a loopback address)", kc.Kubeconfig, u.Host)
		}
		creds, err := googleCredentials(kc, read)
		if err != nil {
			return nil, contextName, &googleCredentialsError{err: err}
		}
		withGoogleToken(cfg, creds)
	}
	if contextName == "" {
		return cfg, hostOf(cfg.Host), nil
	}
	return cfg, contextName, nil
}

// inlineFiles reads the files the context's cluster and user name (relative paths are taken
// from the kubeconfig's directory, as client-go takes them) through read, and puts their
// contents in their *-data fields (the token in token): client-go would open them itself,
// unbounded, and re-read a token file every minute. A changed file is seen by the checker's
// state (clientState.changed), which reads everything again. A token file and a client key are
// secrets: every message of the process is redacted of them.
func inlineFiles(raw *clientcmdapi.Config, contextName, kubeconfig string, read func(string) ([]byte, error)) error {
	ctx := raw.Contexts[contextName]
	if ctx == nil {
		return nil
	}
	base := filepath.Dir(kubeconfig)
	load := func(field, path string, data *[]byte) error {
		if path == "" {
			return nil
		}
		if len(*data) != 0 {
			return fmt.Errorf("%s-data and %s are both set: set one", field, field)
		}
		b, err := read(absFrom(base, path))
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		*data = b
		return nil
	}
	if cl := raw.Clusters[ctx.Cluster]; cl != nil {
		if err := load("certificate-authority", cl.CertificateAuthority, &cl.CertificateAuthorityData); err != nil {
			return err
		}
		cl.CertificateAuthority = ""
	}
	u := raw.AuthInfos[ctx.AuthInfo]
	if u == nil {
		return nil
	}
	if err := load("client-certificate", u.ClientCertificate, &u.ClientCertificateData); err != nil {
		return err
	}
	u.ClientCertificate = ""
	if u.ClientKey != "" {
		checks.WatchSecretFiles(absFrom(base, u.ClientKey))
	}
	if err := load("client-key", u.ClientKey, &u.ClientKeyData); err != nil {
		return err
	}
	u.ClientKey = ""
	if u.TokenFile != "" && u.Token == "" {
		checks.WatchSecretFiles(absFrom(base, u.TokenFile))
		var b []byte
		if err := load("tokenFile", u.TokenFile, &b); err != nil {
			return err
		}
		// As client-go's token file source reads it.
		u.Token = strings.TrimSpace(string(b))
	}
	u.TokenFile = ""
	return nil
}

// absFrom is path, taken from base when it is relative.
func absFrom(base, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(base, path)
}

// plainHTTPWithCredentials refuses a context whose server is plain HTTP to a host that is not
// loopback while its user has credentials (a token, a password, a client certificate, an exec
// or auth-provider plugin). client-go attaches a user's credentials only to TLS connections:
// such a check would run anonymously, and read as Unauthorized or Forbidden rather than as the
// configuration it is; and sending them in clear is no way out.
func plainHTTPWithCredentials(raw *clientcmdapi.Config, contextName string, cfg *rest.Config) error {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil || u.Scheme != "http" || config.LoopbackHost(u.Hostname()) {
		return nil
	}
	ctx := raw.Contexts[contextName]
	if ctx == nil {
		return nil
	}
	user := raw.AuthInfos[ctx.AuthInfo]
	if user == nil || user.Token == "" && user.TokenFile == "" && user.Password == "" && user.Exec == nil &&
		user.AuthProvider == nil && user.ClientCertificate == "" && len(user.ClientCertificateData) == 0 {
		return nil
	}
	return fmt.Errorf("the server of cluster %q (clusters[].cluster.server, context %q) is plain http to %q while user %q "+
		"has credentials: they must not travel in clear, and client-go sends none over plain http (allowed: https, or "+
		"http to localhost or a loopback address)", ctx.Cluster, contextName, u.Host, ctx.AuthInfo)
}

func (st *clientState) build(cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cfg.AcceptContentTypes = "application/json"
	cfg.ContentType = "application/json"
	cfg.NegotiatedSerializer = metainternalversionscheme.Codecs.WithoutConversion()
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.APIPath = "/"
	// One request per round is the only traffic: client-go's token bucket (5/s by default)
	// would only add a wait, which could eat the round's deadline.
	cfg.QPS = -1
	cfg.RateLimiter = nil
	// Deprecation warnings would go to klog; the check has nothing to do with them.
	cfg.WarningHandler = rest.NoWarnings{}
	// Every answer's body is read with a bound (the request's context bounds its time).
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return checks.LimitAnswers(rt, checks.MaxAnswerSize) })
	for _, s := range []string{cfg.BearerToken, cfg.Password} {
		// Shorter strings are no real credential and would garble every message.
		if len(s) >= minSecretLen {
			st.secrets = append(st.secrets, s)
		}
	}
	// Building the HTTP client reads the certificate and key files the kubeconfig names, so
	// a missing one is a configuration error now rather than a puzzling failure later.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("client configuration: %w", err)
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("client configuration: %w", err)
	}
	st.client, st.http = rc, hc
	return nil
}

// Name is the provider's name.
func (c *Checker) Name() string { return c.name }

// Type is always kubernetes.
func (c *Checker) Type() checks.ProviderType { return Type }

// Targets is the one target: the kubeconfig context, or the API server's host.
func (c *Checker) Targets() []string { return []string{c.target} }

// Stale reports whether the checker should be rebuilt at a reload even though its providers
// file block did not change: its configuration was unusable (ConfigError), or the kubeconfig
// changed since it was read (a check would read it again; a reload starts afresh).
func (c *Checker) Stale() bool {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	return st.err != nil || c.block.Kubeconfig != "" && st.changed()
}

// Close cuts the checks in progress (their request's connection closes with them) and closes
// the checker's idle connections to the API server. client-go wraps the transport in round
// trippers that hide CloseIdleConnections from http.Client's own, so the helper that unwraps
// them is used. It does not wait for a check, and may be called again.
func (c *Checker) Close() error {
	c.closing.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.http != nil {
		utilnet.CloseIdleConnectionsFor(c.state.http.Transport)
	}
	return nil
}

// Check lists at most one object (one request, limit=1, no paging, no retry) and turns the
// outcome into the target's verdict. It makes no request when ctx is already done.
func (c *Checker) Check(ctx context.Context) []checks.TargetResult {
	start := time.Now()
	ctx, stop := c.closing.Scope(ctx)
	defer stop()
	st := c.current()
	reason, msg := c.check(ctx, st)
	// No secret, no control character, a bounded length, before it is logged.
	msg = checks.Sanitize(st.redact(msg))
	end := time.Now()
	r := checks.TargetResult{
		Target:    c.target,
		Up:        reason == checks.ReasonReady,
		Reason:    reason,
		Message:   msg,
		Duration:  end.Sub(start),
		CheckedAt: end,
	}
	c.logger.Debug("kubernetes check done", "target", c.target, "reason", string(reason), "duration", r.Duration, "message", msg)
	return []checks.TargetResult{r}
}

func (c *Checker) check(ctx context.Context, st *clientState) (checks.Reason, string) {
	if st.err != nil {
		return ReasonConfigError, st.err.Error()
	}
	if err := ctx.Err(); err != nil {
		return checks.ReasonTimeout, fmt.Sprintf("not checked: the check's deadline had already passed (%v)", err)
	}
	req := st.client.Get().
		AbsPath(c.path()...).
		SetHeader("Accept", acceptMetadata).
		Param("limit", "1").
		// One request, whatever the answer: a retry would hide what the API server said and
		// could outlast the round.
		MaxRetries(0)
	if c.selector != "" {
		req = req.Param("labelSelector", c.selector)
	}
	result := req.Do(ctx)
	// Error, unlike Raw, decodes the API server's Status, so its reason and message survive.
	if err := result.Error(); err != nil {
		if checks.IsAnswerTooLarge(err) {
			return checks.ReasonAPIError, fmt.Sprintf("list %s: %v", c.what, checks.ErrAnswerTooLarge)
		}
		return classify(ctx, err, c.what)
	}
	raw, err := result.Raw()
	if err != nil {
		return classify(ctx, err, c.what)
	}
	var list metav1.PartialObjectMetadataList
	if err := json.Unmarshal(raw, &list); err != nil {
		if ctx.Err() != nil {
			// The deadline cut the answer short: the body is whatever arrived before it.
			return classify(ctx, ctx.Err(), c.what)
		}
		return checks.ReasonAPIError, fmt.Sprintf("list %s: the API server's answer is not a list: %v", c.what, err)
	}
	more := ""
	if list.Continue != "" || (list.RemainingItemCount != nil && *list.RemainingItemCount > 0) {
		more = ", more exist"
	}
	return checks.ReasonReady, fmt.Sprintf("listed %s%s: %d returned (limit 1)%s", c.what, c.selectorText(), len(list.Items), more)
}

// path is the list URL's path: /api/v1/... for the core group, /apis/GROUP/VERSION/... otherwise.
func (c *Checker) path() []string {
	var p []string
	if c.gvr.Group == "" {
		p = []string{"api", c.gvr.Version}
	} else {
		p = []string{"apis", c.gvr.Group, c.gvr.Version}
	}
	if c.namespace != "" {
		p = append(p, "namespaces", c.namespace)
	}
	return append(p, c.gvr.Resource)
}

func (c *Checker) selectorText() string {
	if c.selector == "" {
		return ""
	}
	return fmt.Sprintf(" with labelSelector %q", c.selector)
}

// redact removes the credentials the configuration holds from s, in case an error quotes them.
func (st *clientState) redact(s string) string {
	for _, secret := range st.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

func describe(gvr schema.GroupVersionResource, namespace string) string {
	gv := gvr.Version
	if gvr.Group != "" {
		gv = gvr.Group + "/" + gvr.Version
	}
	where := "in all namespaces"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	return fmt.Sprintf("%s (%s) %s", gvr.Resource, gv, where)
}

func hostOf(host string) string {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		return u.Host
	}
	return strings.TrimSuffix(host, "/")
}

// ProbeTarget checks the one target now, on demand: the same single LIST request as a round's
// check, bounded by ctx. It shares nothing with a round in progress but the HTTP connections.
func (c *Checker) ProbeTarget(ctx context.Context, target string, trace *checks.Trace) (checks.TargetResult, error) {
	return checks.ProbeSingle(ctx, c, target, trace, "list "+c.what+c.selectorText()+" (limit 1)")
}
