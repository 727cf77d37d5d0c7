// Package gcp checks a Google Compute Engine project (`type: gcp`): with the least possible work
// it proves that the Compute API answers and that the exporter's identity may list the
// project's instances. One check is one instances.aggregatedList request for one page of at
// most one instance (plus, once per token lifetime, the OAuth token exchange).
//
// The compute v1 REST client builds its HTTP request without the caller's context, so a slow
// API is not cut by ctx. The check therefore runs the call in a goroutine, reports Timeout at
// the deadline, and gives the call's http.Client a timeout equal to the time left, so that an
// abandoned call ends at about the same moment instead of leaking.
package gcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

// DefaultEndpoint is the Compute API endpoint used when the provider names none.
const DefaultEndpoint = "https://compute.googleapis.com"

// Scope is the only OAuth scope the check asks for: listing instances needs no more.
const Scope = "https://www.googleapis.com/auth/compute.readonly"

const (
	// callTimeoutWithoutDeadline bounds a call when the check's context has no deadline.
	callTimeoutWithoutDeadline = 30 * time.Second
	// tokenTimeout bounds a token exchange the SDK starts on its own (background refresh),
	// which carries no deadline of a check.
	tokenTimeout = 30 * time.Second
	// dialTimeout bounds the TCP connect and the TLS handshake of a new connection.
	dialTimeout = 10 * time.Second
	// maxMessageLen keeps messages short enough for a CRD status and a log line.
	maxMessageLen = 300
)

// Checker checks one gcp provider. It implements checks.Checker and io.Closer.
type Checker struct {
	name     string
	project  string
	filter   string
	endpoint string
	credFile string
	logger   *slog.Logger

	// base carries every connection of the checker (API and token endpoint) so Close can
	// release them.
	base *http.Transport

	// tokenInFlight counts calls to the token source in progress; a cached token returns at
	// once, so a call still running at the deadline is a slow token exchange.
	tokenInFlight atomic.Int32

	mu sync.Mutex
	// authRT adds the bearer token to API requests; nil until credentials have loaded.
	authRT http.RoundTripper
}

// New returns the checker of a gcp provider; logger is expected to be scoped to the provider
// already. Configuration errors (no gcp block, no project, a malformed endpoint) are errors.
// The filter is used as given: the config loader fills in config.DefaultGCPFilter when the
// providers file has none; an empty filter lists every instance.
//
// A credentials problem (an unreadable or invalid key file, no Application Default
// Credentials) is not an error of New: the checker logs it and reports CredentialsError on
// every check, loading the credentials again each time until they load, so a key that
// appears later (a mounted secret) is picked up without a reload. New makes no request.
func New(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	if p.GCP == nil {
		return nil, fmt.Errorf("provider %q: type gcp needs a gcp block", p.Name)
	}
	g := p.GCP
	if g.Project == "" {
		return nil, fmt.Errorf("provider %q: gcp.project is required", p.Name)
	}
	endpoint := g.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("provider %q: gcp.endpoint: %w", p.Name, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("provider %q: gcp.endpoint %q: want an http(s) URL with a host", p.Name, endpoint)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Checker{
		name:     p.Name,
		project:  g.Project,
		filter:   g.Filter,
		endpoint: strings.TrimSuffix(endpoint, "/"),
		credFile: g.CredentialsFile,
		logger:   logger,
		base:     newBaseTransport(),
	}
	// A key file is read now (no network), so a broken one is logged at load. Application
	// Default Credentials are looked up at the first check instead: without the environment
	// variable or gcloud's file the lookup asks the GCE metadata server, and a constructor
	// must not touch the network.
	if c.credFile != "" {
		if _, err := c.transport(); err != nil {
			c.logger.Warn("gcp credentials unusable; every check reports CredentialsError until they load",
				"credentials_file", c.credFile, "err", credentialsMessage(err))
		}
	}
	return c, nil
}

// newBaseTransport is the transport under both the API calls and the token exchange: every
// stage of a new connection is bounded here, the whole call by the http.Client timeout.
func newBaseTransport() *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: callTimeoutWithoutDeadline,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   2,
	}
}

// Name is the provider's name.
func (c *Checker) Name() string { return c.name }

// Type is checks.TypeGCP.
func (c *Checker) Type() checks.ProviderType { return checks.TypeGCP }

// Targets is the one target of a gcp provider: its project.
func (c *Checker) Targets() []string { return []string{c.project} }

// Close releases the checker's idle connections.
func (c *Checker) Close() error {
	c.base.CloseIdleConnections()
	return nil
}

// transport returns the authorizing round tripper, loading the credentials on first use (and
// again after a failure). Loading reads the key file; no token is fetched here.
func (c *Checker) transport() (http.RoundTripper, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.authRT != nil {
		return c.authRT, nil
	}
	opts := &credentials.DetectOptions{
		Scopes: []string{Scope},
		// The token exchange gets its own bound: a background refresh has no check deadline.
		Client: &http.Client{Transport: c.base, Timeout: tokenTimeout},
	}
	var creds *auth.Credentials
	var err error
	if c.credFile != "" {
		var key []byte
		if key, err = readServiceAccountKey(c.credFile); err == nil {
			creds, err = credentials.NewCredentialsFromJSON(credentials.ServiceAccount, key, opts)
		}
	} else {
		creds, err = credentials.DetectDefault(opts)
	}
	if err != nil {
		return nil, &credentialsError{err: err}
	}
	// Tag every failure of the token source, so a failed exchange is told apart from a failed
	// API call in the error the SDK hands back, and count exchanges in progress, so a timeout
	// can say which of the two was slow.
	creds.TokenProvider = tokenProvider{tp: creds.TokenProvider, inFlight: &c.tokenInFlight}
	hc := &http.Client{Transport: c.base}
	if err := httptransport.AddAuthorizationMiddleware(hc, creds); err != nil {
		return nil, &credentialsError{err: err}
	}
	c.authRT = hc.Transport
	return c.authRT, nil
}

// readServiceAccountKey reads a key file and checks that its private key parses, so that a
// broken key is reported when it is loaded, with a short message, rather than at every token
// exchange with the parser's dump.
func readServiceAccountKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	var f struct {
		PrivateKey string `json:"private_key"`
	}
	if json.Unmarshal(b, &f) != nil {
		// The decoder's error quotes the file's content; name the file only.
		return nil, fmt.Errorf("key file %s is not a JSON service-account key", path)
	}
	if f.PrivateKey == "" {
		return nil, fmt.Errorf("key file %s has no private_key", path)
	}
	block, _ := pem.Decode([]byte(f.PrivateKey))
	if block == nil {
		return nil, fmt.Errorf("key file %s: private_key is not PEM-encoded", path)
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if _, err1 := x509.ParsePKCS1PrivateKey(block.Bytes); err1 != nil {
			// The parsers' errors describe the DER structure; say only what is wrong.
			return nil, fmt.Errorf("key file %s: private_key is neither a PKCS#8 nor a PKCS#1 private key", path)
		}
	}
	return b, nil
}

// credentialsError is a failure to load the credentials (no network involved).
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "load credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

// tokenError is a failure of the token source: the OAuth exchange or the key it signs with.
type tokenError struct{ err error }

func (e *tokenError) Error() string { return "token exchange: " + e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

type tokenProvider struct {
	tp       auth.TokenProvider
	inFlight *atomic.Int32
}

func (p tokenProvider) Token(ctx context.Context) (*auth.Token, error) {
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	t, err := p.tp.Token(ctx)
	if err != nil {
		return nil, &tokenError{err: err}
	}
	return t, nil
}

// outcome is what one call learned.
type outcome struct {
	instances int
	err       error
}

// Check lists one page of at most one instance of the project. It returns by ctx's deadline
// whatever the API does, and makes no request when ctx is already done.
func (c *Checker) Check(ctx context.Context) []checks.TargetResult {
	start := time.Now()
	if ctx.Err() != nil {
		return c.result(start, checks.ReasonTimeout, "check not started: the check's deadline had already passed")
	}
	budget := callTimeoutWithoutDeadline
	if dl, ok := ctx.Deadline(); ok {
		// An http.Client timeout of zero or less means none: never start a call without one.
		if budget = time.Until(dl); budget <= 0 {
			return c.result(start, checks.ReasonTimeout, "check not started: the check's deadline had already passed")
		}
	}
	done := make(chan outcome, 1) // buffered: an abandoned call must not block on sending
	go func() { done <- c.call(ctx, budget) }()

	timeout := func(inTokenExchange bool) []checks.TargetResult {
		what := "the Compute API did not answer"
		if inTokenExchange {
			what = "the OAuth token exchange did not finish"
		}
		return c.result(start, checks.ReasonTimeout, fmt.Sprintf(
			"%s within %s; the call is abandoned", what, time.Since(start).Round(time.Millisecond)))
	}
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		select {
		case o = <-done: // the answer and the deadline arrived together: keep the answer
		default:
			return timeout(c.tokenInFlight.Load() > 0)
		}
	}
	// The call's own timeout is the check's deadline: it may report first.
	if o.err != nil && isTimeout(ctx, o.err) {
		var terr *tokenError
		return timeout(errors.As(o.err, &terr))
	}
	if o.err == nil {
		msg := "instances.aggregatedList answered: no instance matches the filter"
		if o.instances > 0 {
			msg = "instances.aggregatedList answered with a matching instance"
		}
		return c.result(start, checks.ReasonReady, msg)
	}
	reason, msg := classify(o.err)
	return c.result(start, reason, msg)
}

// call makes the one request of a check. It runs in its own goroutine: the SDK's REST call
// ignores ctx, so the http.Client timeout (the time left to the check) is what ends it.
func (c *Checker) call(ctx context.Context, budget time.Duration) outcome {
	rt, err := c.transport()
	if err != nil {
		return outcome{err: err}
	}
	// A fresh client per check is a few small structs; it carries this check's deadline as
	// the http.Client timeout, while connections and the token cache stay shared in rt.
	hc := &http.Client{Transport: rt, Timeout: budget}
	client, err := compute.NewInstancesRESTClient(ctx, option.WithHTTPClient(hc), option.WithEndpoint(c.endpoint))
	if err != nil {
		return outcome{err: fmt.Errorf("create compute client: %w", err)}
	}
	defer func() { _ = client.Close() }()

	req := &computepb.AggregatedListInstancesRequest{Project: c.project, MaxResults: proto.Uint32(1)}
	if c.filter != "" {
		req.Filter = proto.String(c.filter)
	}
	// One page of one item: the iterator's Next would follow nextPageToken through the whole
	// fleet, a request per page.
	var page []compute.InstancesScopedListPair
	if _, err := iterator.NewPager(client.AggregatedList(ctx, req), 1, "").NextPage(&page); err != nil {
		return outcome{err: err}
	}
	n := 0
	for _, p := range page {
		n += len(p.Value.GetInstances())
	}
	return outcome{instances: n}
}

func (c *Checker) result(start time.Time, reason checks.Reason, msg string) []checks.TargetResult {
	now := time.Now()
	msg = truncate(msg)
	r := checks.TargetResult{
		Target:    c.project,
		Up:        reason == checks.ReasonReady,
		Reason:    reason,
		Message:   msg,
		Duration:  now.Sub(start),
		CheckedAt: now,
	}
	c.logger.Debug("gcp check done", "target", c.project, "reason", string(reason), "message", msg,
		"duration", r.Duration)
	return []checks.TargetResult{r}
}

// classify maps a failed call that did not time out to a reason and a message. Messages are built from chosen parts
// of the error (status, Google's message, the network operation), never from request headers
// or credentials.
func classify(err error) (checks.Reason, string) {
	var cerr *credentialsError
	if errors.As(err, &cerr) {
		return checks.ReasonCredentialsError, credentialsMessage(err)
	}
	var terr *tokenError
	if errors.As(err, &terr) {
		if isUnreachable(terr.err) {
			return checks.ReasonAPIUnreachable, "OAuth token endpoint unreachable: " + netMessage(terr.err)
		}
		return checks.ReasonCredentialsError, "OAuth token exchange failed: " + tokenMessage(terr.err)
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		msg := fmt.Sprintf("Compute API answered %d", gerr.Code)
		if gerr.Message != "" {
			msg += ": " + gerr.Message
		}
		switch {
		case gerr.Code == http.StatusUnauthorized:
			return checks.ReasonUnauthorized, msg
		case gerr.Code == http.StatusForbidden:
			return checks.ReasonForbidden, msg
		case gerr.Code == http.StatusNotFound:
			return checks.ReasonProjectNotFound, msg
		case gerr.Code == http.StatusTooManyRequests:
			return checks.ReasonRateLimited, msg
		}
		return checks.ReasonAPIError, msg
	}
	if isUnreachable(err) {
		return checks.ReasonAPIUnreachable, "Compute API unreachable: " + netMessage(err)
	}
	return checks.ReasonAPIError, "Compute API call failed: " + netMessage(err)
}

func isTimeout(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isUnreachable reports failures to reach the endpoint at all: name resolution, TCP connect,
// TLS handshake and certificate verification.
func isUnreachable(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recErr tls.RecordHeaderError
	switch {
	case errors.As(err, &dnsErr), errors.As(err, &certErr), errors.As(err, &unknownAuth),
		errors.As(err, &hostErr), errors.As(err, &recErr):
		return true
	case errors.As(err, &opErr):
		return opErr.Op == "dial"
	}
	return false
}

// netMessage describes a transport failure by its innermost network error, without the
// request URL.
func netMessage(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Error()
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err.Error()
	}
	return err.Error()
}

// tokenMessage describes a failed exchange by the OAuth error code and description the token
// endpoint answered, or the local failure (e.g. a key that does not parse).
func tokenMessage(err error) string {
	var aerr *auth.Error
	if errors.As(err, &aerr) && aerr.Response != nil {
		var body struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		msg := fmt.Sprintf("token endpoint answered %d", aerr.Response.StatusCode)
		if json.Unmarshal(aerr.Body, &body) == nil && body.Error != "" {
			msg += " " + body.Error
			if body.Description != "" {
				msg += ": " + body.Description
			}
		}
		return msg
	}
	var rerr *oauth2.RetrieveError
	if errors.As(err, &rerr) && rerr.Response != nil {
		msg := fmt.Sprintf("token endpoint answered %d", rerr.Response.StatusCode)
		if rerr.ErrorCode != "" {
			msg += " " + rerr.ErrorCode
			if rerr.ErrorDescription != "" {
				msg += ": " + rerr.ErrorDescription
			}
		}
		return msg
	}
	return err.Error()
}

// credentialsMessage describes a credentials file that did not load. The parsers' errors name
// the file or the field that is wrong, never its content.
func credentialsMessage(err error) string {
	var cerr *credentialsError
	if errors.As(err, &cerr) {
		err = cerr.err
	}
	return "credentials not loaded: " + err.Error()
}

func truncate(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxMessageLen {
		return s[:maxMessageLen-1] + "…"
	}
	return s
}
