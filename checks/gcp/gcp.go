// Package gcp checks a Google Compute Engine project (`type: gcp`): with the least possible work
// it proves that the Compute API answers and that the exporter's identity may list the
// project's instances. One check is one instances.aggregatedList request for one page of at
// most one instance (plus, once per token lifetime, the OAuth token exchange).
//
// The compute v1 REST client builds its HTTP request without the caller's context, so a slow
// API is not cut by ctx. The check therefore runs the call in a goroutine, reports Timeout at
// the deadline, and gives the call's http.Client a timeout equal to the time left, so that an
// abandoned call ends at about the same moment instead of leaking.
//
// The SDK's own debug logging (GOOGLE_SDK_GO_LOGGING_LEVEL) is switched off for the checker:
// it writes the token exchange, access token included, to stderr.
package gcp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// Type is the providers file's name of the type: `type: gcp`.
const Type checks.ProviderType = "gcp"

// The reasons only the gcp type reports (its catalogue, block.go, also lists the shared ones).
const (
	ReasonProjectNotFound checks.Reason = "ProjectNotFound"
	ReasonRateLimited     checks.Reason = "RateLimited"
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
)

// Checker checks one gcp provider. It implements checks.Checker and io.Closer.
type Checker struct {
	name     string
	project  string
	filter   string
	endpoint string
	credFile string
	// insecure allows a plain-HTTP token_uri to a host that is not loopback.
	insecure bool
	logger   *slog.Logger

	// base carries every connection of the checker (API and token endpoint) so Close can
	// release them; dialer bounds its TCP connects. conns are the connections base opened:
	// Close closes them, which is what ends a call in progress (the SDK's REST call is not
	// cut by its context). closing cuts the checks in progress.
	base    *http.Transport
	dialer  *net.Dialer
	conns   *conns
	closing checks.Closing

	// tokenInFlight counts calls to the token source in progress; a cached token returns at
	// once, so a call still running at the deadline is a slow token exchange.
	tokenInFlight atomic.Int32
	// tokenFailedAt is when a token exchange last failed (Unix nanoseconds).
	tokenFailedAt atomic.Int64

	mu sync.Mutex
	// authRT adds the bearer token to API requests; nil until credentials have loaded, after
	// a failed load, and after the API refused its token (401).
	authRT http.RoundTripper
	// loadedAt is the key file's state when authRT was built from it: a change (a rotated
	// Secret) makes the next check load the file again.
	loadedAt checks.FileState
	// loadErr is the error of the last load, nil once credentials have loaded.
	loadErr error
	// loading is closed when the load in progress ends; nil when none runs. One load at a
	// time, and a check waits for it only until its own deadline.
	loading chan struct{}
}

// discard is handed to the SDK wherever it would otherwise build its own logger from
// GOOGLE_SDK_GO_LOGGING_LEVEL: at debug level that logger writes the token requests and
// responses, the signed JWT and the access token included, to stderr.
var discard = slog.New(slog.DiscardHandler)

// New returns the checker of a gcp provider; logger is expected to be scoped to the provider
// already. Configuration errors (no gcp block, no project, a malformed endpoint) are errors.
// The filter is used as given: the config loader fills in DefaultFilter when the
// providers file has none; an empty filter lists every instance.
//
// A credentials problem (an unreadable or invalid key file, no Application Default
// Credentials) is not an error of New: the checker logs it and reports CredentialsError on
// every check, loading the credentials again each time until they load, so a key that
// appears later (a mounted secret) is picked up without a reload. New makes no request.
func New(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	g, ok := p.Block.(*Config)
	if !ok {
		return nil, fmt.Errorf("provider %q: type gcp needs a gcp block", p.Name)
	}
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
	if problem := PlainHTTPProblem(u, g.InsecureAllowHTTP); problem != "" {
		return nil, fmt.Errorf("provider %q: gcp.endpoint: %s", p.Name, problem)
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
		insecure: g.InsecureAllowHTTP,
		logger:   logger,
	}
	if c.credFile == "" {
		// Application Default Credentials' key file, when the environment names one, is as
		// secret as a configured one.
		checks.WatchSecretFiles(os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"))
	}
	c.base, c.dialer, c.conns = newBaseTransport()
	// A key file is read now (no network), so a broken one is logged at load. Application
	// Default Credentials are looked up at the first check instead: without the environment
	// variable or gcloud's file the lookup asks the GCE metadata server, and a constructor
	// must not touch the network.
	if c.credFile != "" {
		if _, err := c.transport(context.Background()); err != nil {
			c.logger.Warn("gcp credentials unusable; every check reports CredentialsError until they load",
				"credentials_file", c.credFile, "err", checks.Sanitize(credentialsMessage(err)))
		}
	}
	return c, nil
}

// newBaseTransport is the transport under both the API calls and the token exchange: every
// stage of a new connection is bounded here, the whole call by the http.Client timeout.
func newBaseTransport() (*http.Transport, *net.Dialer, *conns) {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	cs := &conns{open: map[*trackedConn]struct{}{}}
	cs.dials, cs.endDials = context.WithCancel(context.Background())
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           cs.dialer(d),
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: callTimeoutWithoutDeadline,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   2,
	}, d, cs
}

// conns are the connections a checker's transport opened and has not closed.
type conns struct {
	mu     sync.Mutex
	closed bool
	open   map[*trackedConn]struct{}
	// dials ends with closeAll, and with it every dial in progress: net/http runs a dial on
	// after its request was cut (to the dial's own bound, dialTimeout), so that the
	// connection may serve the next request.
	dials    context.Context
	endDials context.CancelFunc
}

// dialer dials with d and keeps the connection, until it closes; once closeAll ran it dials
// no more, and the dials in progress end.
func (cs *conns) dialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(cs.dials, cancel)()
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, cs: cs}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.closed {
			conn.Close()
			return nil, checks.ErrCheckerClosed
		}
		cs.open[tc] = struct{}{}
		return tc, nil
	}
}

// closeAll closes every open connection, in use or idle, and refuses later dials.
func (cs *conns) closeAll() {
	cs.endDials()
	cs.mu.Lock()
	cs.closed = true
	open := make([]*trackedConn, 0, len(cs.open))
	for c := range cs.open {
		open = append(open, c)
	}
	cs.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	cs *conns
}

func (c *trackedConn) Close() error {
	c.cs.mu.Lock()
	delete(c.cs.open, c)
	c.cs.mu.Unlock()
	return c.Conn.Close()
}

// Name is the provider's name.
func (c *Checker) Name() string { return c.name }

// Type is Type.
func (c *Checker) Type() checks.ProviderType { return Type }

// Targets is the one target of a gcp provider: its project.
func (c *Checker) Targets() []string { return []string{c.project} }

// Close cuts the checks in progress, ends the dials in progress and closes every connection of
// the checker, those of an abandoned call included, so that the call ends now rather than at
// its own timeout. It does
// not wait for a check, and may be called again.
func (c *Checker) Close() error {
	c.closing.Close()
	c.conns.closeAll()
	c.base.CloseIdleConnections()
	return nil
}

// Stale reports whether the checker should be rebuilt at a reload although its providers-file
// block did not change: the credentials did not load at the last attempt, or the key file
// changed (modification time or size) since it was loaded, e.g. a rotated Secret. The checker
// also loads a changed key by itself at its next check; Stale lets a reload start afresh too.
func (c *Checker) Stale() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loadErr != nil {
		return true
	}
	return c.authRT != nil && c.keyChangedLocked()
}

// keyChangedLocked reports whether the key file is no longer the one authRT was built from.
func (c *Checker) keyChangedLocked() bool {
	return c.credFile != "" && c.loadedAt.Changed(c.credFile)
}

// transport returns the authorizing round tripper, loading the credentials on first use, again
// after a failure or a 401, and again when the key file changed since it was loaded. Loading
// reads the key file (for Application Default Credentials it may probe the metadata server); no
// token is fetched here. A caller waits for a load only as long as ctx allows; the load itself
// cannot be cancelled (the SDK's lookup takes no context) and finishes on its own.
func (c *Checker) transport(ctx context.Context) (http.RoundTripper, error) {
	for {
		c.mu.Lock()
		if c.authRT != nil && !c.keyChangedLocked() {
			rt := c.authRT
			c.mu.Unlock()
			return rt, nil
		}
		if wait := c.loading; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		done := make(chan struct{})
		c.loading = done
		c.mu.Unlock()

		rt, at, err := c.load()

		c.mu.Lock()
		c.loading = nil
		close(done)
		if err != nil {
			c.authRT, c.loadErr = nil, err
		} else {
			c.authRT, c.loadedAt, c.loadErr = rt, at, nil
		}
		c.mu.Unlock()
		return rt, err
	}
}

// dropToken forgets the round tripper (and so its cached token) after the API refused the
// token (401): the next check loads the credentials again and exchanges a fresh token instead
// of presenting the refused one until it expires. rt is the round tripper the refused call
// used; a newer one (already reloaded) is kept.
func (c *Checker) dropToken(rt http.RoundTripper) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rt != nil && c.authRT == rt {
		c.authRT = nil
	}
}

// load builds the authorizing round tripper from the key file or from Application Default
// Credentials, and returns the key file's state as it was before the read (so a change during
// the read still counts as a change).
func (c *Checker) load() (http.RoundTripper, checks.FileState, error) {
	opts := &credentials.DetectOptions{
		Scopes: []string{Scope},
		// The token exchange gets its own bound: a background refresh has no check deadline.
		Client: &http.Client{Transport: checks.LimitAnswers(c.base, checks.MaxAnswerSize), Timeout: tokenTimeout},
		Logger: discard,
	}
	var creds *auth.Credentials
	var at checks.FileState
	var err error
	if c.credFile != "" {
		at, _ = checks.StatFile(c.credFile)
		var key []byte
		if key, err = readServiceAccountKey(c.credFile); err == nil {
			err = c.tokenURIProblem(key)
		}
		if err == nil {
			creds, err = credentials.NewCredentialsFromJSON(credentials.ServiceAccount, key, opts)
		}
	} else {
		creds, err = credentials.DetectDefault(opts)
	}
	if err != nil {
		return nil, at, &credentialsError{err: err}
	}
	// Tag every failure of the token source, so a failed exchange is told apart from a failed
	// API call in the error the SDK hands back, and count exchanges in progress, so a timeout
	// can say which of the two was slow.
	creds.TokenProvider = tokenProvider{tp: creds.TokenProvider, inFlight: &c.tokenInFlight, failedAt: &c.tokenFailedAt}
	hc := &http.Client{Transport: c.base}
	if err := httptransport.AddAuthorizationMiddleware(hc, creds); err != nil {
		return nil, at, &credentialsError{err: err}
	}
	return hc.Transport, at, nil
}

// readServiceAccountKey reads a key file and checks that its private key parses
// (checks.ServiceAccountKeyProblem).
func readServiceAccountKey(path string) ([]byte, error) {
	b, err := fileread.Read(path, fileread.CredentialLimit)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	if err := checks.ServiceAccountKeyProblem(path, b); err != nil {
		return nil, err
	}
	return b, nil
}

// tokenURIProblem refuses a key whose token_uri is plain HTTP to a host that is not loopback
// (unless the block allows it): the token exchange would send the signed assertion and get the
// access token back in clear.
func (c *Checker) tokenURIProblem(key []byte) error {
	var f struct {
		TokenURI string `json:"token_uri"`
	}
	if json.Unmarshal(key, &f) != nil || f.TokenURI == "" {
		return nil
	}
	u, err := url.Parse(f.TokenURI)
	if err != nil {
		return fmt.Errorf("key file %s: token_uri is not a URL", c.credFile)
	}
	if problem := PlainHTTPProblem(u, c.insecure); problem != "" {
		return fmt.Errorf("key file %s: token_uri: %s", c.credFile, strings.Replace(problem, "the bearer token", "the token exchange", 1))
	}
	return nil
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
	// failedAt is when an exchange last failed (Unix nanoseconds): an exchange cut by the
	// deadline may end a moment before the check reports the timeout, and must still be named.
	failedAt *atomic.Int64
}

func (p tokenProvider) Token(ctx context.Context) (*auth.Token, error) {
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	t, err := p.tp.Token(ctx)
	if err != nil {
		p.failedAt.Store(time.Now().UnixNano())
		return nil, &tokenError{err: err}
	}
	return t, nil
}

// outcome is what one call learned.
type outcome struct {
	instances int
	err       error
	// rt is the round tripper the call used, nil when none was loaded.
	rt http.RoundTripper
}

// Stages of a call, for the message of a Timeout.
const (
	stageCredentials int32 = iota // loading the credentials (or waiting for a load)
	stageCall                     // the token exchange and the instances request
)

// Check lists one page of at most one instance of the project. It returns by ctx's deadline
// whatever the API does, and makes no request when ctx is already done. Only that deadline is
// Timeout: a connect or TLS handshake that times out first is APIUnreachable.
func (c *Checker) Check(ctx context.Context) []checks.TargetResult {
	start := time.Now()
	if ctx.Err() != nil {
		return c.result(start, checks.ReasonTimeout, "check not started: the check's deadline had already passed")
	}
	ctx, stop := c.closing.Scope(ctx)
	defer stop()
	if _, ok := ctx.Deadline(); !ok {
		// The round's deadline is the only bound of a call: give one to a context without.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeoutWithoutDeadline)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	stage := new(atomic.Int32)
	done := make(chan outcome, 1) // buffered: an abandoned call must not block on sending
	go func() { done <- c.call(ctx, stage) }()

	// timeout reports the deadline; err is the call's error when it came back cut.
	timeout := func(err error) []checks.TargetResult {
		var terr *tokenError
		what := "the Compute API did not answer"
		if errors.Is(context.Cause(ctx), checks.ErrCheckerClosed) {
			return c.result(start, checks.ReasonTimeout, fmt.Sprintf(
				"%v after %s (the provider was removed or changed by a reload, or the exporter is stopping); the call is abandoned",
				checks.ErrCheckerClosed, time.Since(start).Round(time.Millisecond)))
		}
		switch {
		case stage.Load() == stageCredentials:
			what = "loading the credentials did not finish"
		case c.tokenInFlight.Load() > 0 || c.tokenFailedAt.Load() >= start.UnixNano() || errors.As(err, &terr):
			what = "the OAuth token exchange did not finish"
		}
		return c.result(start, checks.ReasonTimeout, fmt.Sprintf(
			"%s within %s; the call is abandoned", what, time.Since(start).Round(time.Millisecond)))
	}
	o, ok := checks.Await(ctx, done)
	if !ok {
		return timeout(nil)
	}
	if o.err == nil {
		msg := "instances.aggregatedList answered: no instance matches the filter"
		if o.instances > 0 {
			msg = "instances.aggregatedList answered with a matching instance"
		}
		return c.result(start, checks.ReasonReady, msg)
	}
	// The call's http.Client timeout is the time left when the client was built, so it fires
	// at or after the deadline: a timeout from then on is the deadline's. A timeout before it
	// (a connect or TLS handshake bounded by the transport) is classified below, like an
	// answer that came in at the deadline.
	if cutByDeadline(o.err) && (ctx.Err() != nil || !time.Now().Before(deadline)) {
		return timeout(o.err)
	}
	if checks.IsAnswerTooLarge(o.err) {
		return c.result(start, checks.ReasonAPIError, "list instances: "+checks.ErrAnswerTooLarge.Error())
	}
	reason, msg := classify(o.err)
	if reason == checks.ReasonUnauthorized {
		c.dropToken(o.rt)
	}
	return c.result(start, reason, msg)
}

// call makes the one request of a check. It runs in its own goroutine: the SDK's REST call
// ignores ctx, so the http.Client timeout (the time left to the check when the client is
// built) is what ends it.
func (c *Checker) call(ctx context.Context, stage *atomic.Int32) outcome {
	rt, err := c.transport(ctx)
	if err != nil {
		return outcome{err: err}
	}
	stage.Store(stageCall)
	// The budget is taken now, after the credentials load (which may have waited), so that
	// an abandoned call ends at the deadline and not that much later. ctx has a deadline
	// (Check gives it one); an http.Client timeout of zero or less would mean none.
	dl, _ := ctx.Deadline()
	budget := time.Until(dl)
	if budget <= 0 || ctx.Err() != nil {
		return outcome{err: context.DeadlineExceeded, rt: rt}
	}
	// A fresh client per check is a few small structs; it carries this check's deadline as
	// the http.Client timeout, while connections and the token cache stay shared in rt.
	// Its body is read with a bound too (checks.MaxAnswerSize).
	hc := &http.Client{Transport: checks.LimitAnswers(rt, checks.MaxAnswerSize), Timeout: budget}
	client, err := compute.NewInstancesRESTClient(ctx, option.WithHTTPClient(hc), option.WithEndpoint(c.endpoint),
		option.WithLogger(discard))
	if err != nil {
		return outcome{err: fmt.Errorf("create compute client: %w", err), rt: rt}
	}
	defer func() { _ = client.Close() }()

	req := &computepb.AggregatedListInstancesRequest{Project: c.project, MaxResults: proto.Uint32(1)}
	if c.filter != "" {
		req.Filter = proto.String(c.filter)
	}
	// Exactly one request: the iterator's Next, and a Pager's NextPage too, follow
	// nextPageToken while a page holds no item (each follow-up built without ctx, so it goes on
	// after the check is abandoned); InternalFetch fetches the one page asked for.
	page, _, err := client.AggregatedList(ctx, req).InternalFetch(1, "")
	if err != nil {
		return outcome{err: err, rt: rt}
	}
	n := 0
	for _, p := range page {
		n += len(p.Value.GetInstances())
	}
	return outcome{instances: n, rt: rt}
}

func (c *Checker) result(start time.Time, reason checks.Reason, msg string) []checks.TargetResult {
	now := time.Now()
	// No secret, no control character, a bounded length, before it is logged.
	msg = checks.Sanitize(msg)
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
		if checks.Unreachable(terr.err) {
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
		case gerr.Code == http.StatusNotFound:
			return ReasonProjectNotFound, msg
		case gerr.Code == http.StatusTooManyRequests:
			return ReasonRateLimited, msg
		}
		// GCE answers a rate quota with 403 as well as 429: the error's reason tells it apart
		// from a missing permission.
		if reason := rateLimitReason(err, gerr); reason != "" {
			return ReasonRateLimited, msg + " (" + reason + ")"
		}
		if gerr.Code == http.StatusForbidden {
			return checks.ReasonForbidden, msg
		}
		return checks.ReasonAPIError, msg
	}
	if checks.Unreachable(err) {
		return checks.ReasonAPIUnreachable, "Compute API unreachable: " + netMessage(err)
	}
	return checks.ReasonAPIError, "Compute API call failed: " + netMessage(err)
}

// rateLimitReasons are the error reasons with which Google APIs refuse a request over a rate
// quota: the legacy ones of the JSON error body (GCE's 403) and the ErrorInfo one.
var rateLimitReasons = []string{"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"}

// rateLimitReason returns the reason with which the API refused the call for a rate quota,
// from its error body or its ErrorInfo detail, whatever the status; "" when it did not.
func rateLimitReason(err error, gerr *googleapi.Error) string {
	for _, e := range gerr.Errors {
		if slices.Contains(rateLimitReasons, e.Reason) {
			return e.Reason
		}
	}
	var aerr *apierror.APIError
	if errors.As(err, &aerr) && slices.Contains(rateLimitReasons, aerr.Reason()) {
		return aerr.Reason()
	}
	return ""
}

// cutByDeadline reports errors of a call cut short: by its context, or by a timeout.
func cutByDeadline(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// isTLSHandshakeTimeout reports net/http's TLSHandshakeTimeout, whose error type is not
// exported: a net.Error that says so.
func isTLSHandshakeTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && strings.Contains(ne.Error(), "TLS handshake timeout")
}

// netMessage describes a transport failure by its innermost network error, without the
// request URL.
func netMessage(err error) string {
	var opErr *net.OpError
	var alertErr tls.AlertError
	switch {
	case isTLSHandshakeTimeout(err):
		return "TLS handshake timed out"
	case errors.As(err, &opErr) && opErr.Op == "dial" && opErr.Timeout():
		return "connect timed out: " + opErr.Error()
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset before an answer: " + innerMessage(err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(err.Error(), "server closed idle connection"):
		return "connection closed before an answer: " + innerMessage(err)
	case errors.As(err, &alertErr):
		return "TLS handshake refused by the server: " + innerMessage(err)
	}
	return innerMessage(err)
}

func innerMessage(err error) string { return checks.ErrorDetail(err) }

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

// ProbeTarget checks the one target (the project) now, on demand: the same single
// instances.aggregatedList request as a round's check, bounded by ctx, with the same
// credentials and token cache.
func (c *Checker) ProbeTarget(ctx context.Context, target string, trace *checks.Trace) (checks.TargetResult, error) {
	return checks.ProbeSingle(ctx, c, target, trace, "compute instances.aggregatedList of project "+c.project+" (maxResults 1)")
}
