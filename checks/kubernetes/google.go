package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// googleScopes are the scopes gke-gcloud-auth-plugin asks for: GKE's API servers accept an
// access token with them and authenticate its service account (or user) by email.
var googleScopes = []string{
	"https://www.googleapis.com/auth/cloud-platform",
	"https://www.googleapis.com/auth/userinfo.email",
}

// googleTokenTimeout bounds one token exchange that runs without a check's deadline (the
// library may refresh ahead of expiry); an exchange made for a check also ends with the check.
const googleTokenTimeout = 30 * time.Second

// discardLogger is handed to the Google library wherever it would otherwise build its own
// logger from GOOGLE_SDK_GO_LOGGING_LEVEL, which at debug level writes the token exchange (the
// signed assertion, the access token) to stderr.
var discardLogger = slog.New(slog.DiscardHandler)

// googleCredentialsError is a failure to load the Google credentials: the key file, or no
// Application Default Credentials. It is the configuration's problem (ConfigError).
type googleCredentialsError struct{ err error }

func (e *googleCredentialsError) Error() string { return "Google credentials: " + e.err.Error() }
func (e *googleCredentialsError) Unwrap() error { return e.err }

// googleTokenError is a failure of the token exchange with Google's OAuth endpoint.
type googleTokenError struct{ err error }

func (e *googleTokenError) Error() string { return "Google token exchange: " + e.err.Error() }
func (e *googleTokenError) Unwrap() error { return e.err }

// googleCredentials builds the token source of `auth: google`: the service-account key of
// credentialsFile, read through read (bounded, its state recorded so a rotated key is read
// again) and checked now, or Application Default Credentials, looked up at the first check
// (the lookup may ask the GCE metadata server, and a checker's constructor makes no request).
func googleCredentials(kc Config, read func(string) ([]byte, error)) (*auth.Credentials, error) {
	opts := &credentials.DetectOptions{
		Scopes: googleScopes,
		Client: &http.Client{Transport: googleTransport(), Timeout: googleTokenTimeout},
		Logger: discardLogger,
	}
	if kc.CredentialsFile == "" {
		return auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: &adcProvider{opts: opts}}), nil
	}
	checks.WatchSecretFiles(kc.CredentialsFile)
	key, err := read(kc.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("read credentialsFile: %w", err)
	}
	if err := checks.ServiceAccountKeyProblem(kc.CredentialsFile, key); err != nil {
		return nil, err
	}
	if err := tokenURIProblem(kc.CredentialsFile, key); err != nil {
		return nil, err
	}
	creds, err := credentials.NewCredentialsFromJSON(credentials.ServiceAccount, key, opts)
	if err != nil {
		return nil, fmt.Errorf("credentialsFile %s: %w", kc.CredentialsFile, err)
	}
	return creds, nil
}

// googleTransport is the transport of the token exchange: every stage of a connection bounded.
func googleTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = googleTokenTimeout
	return t
}

// tokenURIProblem refuses a key whose token_uri is plain HTTP to a host that is not loopback:
// the exchange would send the signed assertion, and get the access token back, in clear.
func tokenURIProblem(path string, key []byte) error {
	var f struct {
		TokenURI string `json:"token_uri"`
	}
	if json.Unmarshal(key, &f) != nil || f.TokenURI == "" {
		return nil
	}
	u, err := url.Parse(f.TokenURI)
	if err != nil {
		return fmt.Errorf("key file %s: token_uri is not a URL", path)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && config.LoopbackHost(u.Hostname())) {
		return fmt.Errorf("key file %s: token_uri %q: want https (or http to localhost or a loopback address): the token exchange must not travel in clear", path, f.TokenURI)
	}
	return nil
}

// withGoogleToken makes cfg present the access token of creds as its bearer token, obtained
// (and refreshed ahead of expiry) within each request's context, and drops whatever user the
// kubeconfig named.
func withGoogleToken(cfg *rest.Config, creds *auth.Credentials) {
	cfg.Impersonate = rest.ImpersonationConfig{}
	cfg.AuthProvider, cfg.ExecProvider = nil, nil
	cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password = "", "", "", ""
	cfg.CertData, cfg.CertFile, cfg.KeyData, cfg.KeyFile = nil, "", nil, ""
	tagged := auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: taggedProvider{creds}})
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		hc := &http.Client{Transport: rt}
		// It fails only for a nil client or credentials.
		_ = httptransport.AddAuthorizationMiddleware(hc, tagged)
		return googleRoundTripper{auth: hc.Transport, base: rt}
	}
}

// googleRoundTripper is the Google library's authorizing transport, with the transport under it
// in view of client-go's CloseIdleConnectionsFor (the library's type hides it), so that Close
// still closes the checker's idle connections to the API server.
type googleRoundTripper struct{ auth, base http.RoundTripper }

func (g googleRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	return g.auth.RoundTrip(r)
}

// WrappedRoundTripper is utilnet.RoundTripperWrapper's.
func (g googleRoundTripper) WrappedRoundTripper() http.RoundTripper { return g.base }

// taggedProvider tags every failure of the token source, so that classify tells a refused or
// unreachable token exchange from the API server's own answer.
type taggedProvider struct{ tp auth.TokenProvider }

func (p taggedProvider) Token(ctx context.Context) (*auth.Token, error) {
	t, err := p.tp.Token(ctx)
	if err != nil {
		var cerr *googleCredentialsError
		if errors.As(err, &cerr) {
			return nil, err
		}
		return nil, &googleTokenError{err: err}
	}
	return t, nil
}

// adcProvider looks Application Default Credentials up at the first token it is asked for,
// and again after a failed lookup. The lookup takes no context: a caller waits for it only
// until its own context ends, and one lookup runs at a time.
type adcProvider struct {
	opts *credentials.DetectOptions

	mu  sync.Mutex
	cur *adcLookup
}

type adcLookup struct {
	done  chan struct{}
	creds *auth.Credentials
	err   error
}

func (p *adcProvider) Token(ctx context.Context) (*auth.Token, error) {
	p.mu.Lock()
	l := p.cur
	if l == nil || l.failed() {
		l = &adcLookup{done: make(chan struct{})}
		p.cur = l
		go func() {
			creds, err := credentials.DetectDefault(p.opts)
			if err != nil {
				err = &googleCredentialsError{err: fmt.Errorf("no Application Default Credentials (Workload Identity, GOOGLE_APPLICATION_CREDENTIALS): %w", err)}
			}
			l.creds, l.err = creds, err
			close(l.done)
		}()
	}
	p.mu.Unlock()
	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l.creds.Token(ctx)
}

// failed reports whether the lookup has ended without credentials.
func (l *adcLookup) failed() bool {
	select {
	case <-l.done:
		return l.err != nil
	default:
		return false
	}
}

// classifyGoogle turns a failure of `auth: google`'s token source into a reason; ok is false
// for any other error.
func classifyGoogle(err error, what string) (reason checks.Reason, msg string, ok bool) {
	var cerr *googleCredentialsError
	if errors.As(err, &cerr) {
		return ReasonConfigError, fmt.Sprintf("list %s: %v", what, cerr), true
	}
	var terr *googleTokenError
	if !errors.As(err, &terr) {
		return "", "", false
	}
	var aerr *auth.Error
	if errors.As(terr, &aerr) && aerr.Response != nil && aerr.Response.StatusCode >= 400 && aerr.Response.StatusCode < 500 &&
		aerr.Response.StatusCode != http.StatusTooManyRequests {
		return checks.ReasonUnauthorized, fmt.Sprintf("list %s: Google's token endpoint refused the credentials (%d): %v", what, aerr.Response.StatusCode, terr), true
	}
	if checks.Unreachable(terr.err) {
		return checks.ReasonAPIUnreachable, fmt.Sprintf("list %s: cannot reach Google's token endpoint: %v", what, terr), true
	}
	return checks.ReasonAPIError, fmt.Sprintf("list %s: %v", what, terr), true
}
