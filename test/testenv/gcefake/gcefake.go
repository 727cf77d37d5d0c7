// Package gcefake is the GCE part of the test environment: no emulator of the Compute Engine API
// exists, so this package serves its wire format on loopback. It answers
// GET /compute/v1/projects/{project}/aggregated/instances the way compute v1 does (maxResults as
// the page size, pageToken paging, label filters, NO_RESULTS_ON_PAGE warnings for empty zones,
// Google's JSON error body) and runs an OAuth token endpoint that verifies the RS256-signed
// JWT-bearer assertion of a service-account key the server made itself, so clients exercise
// the real service-account flow of the Google SDKs end to end.
//
// Faults are injected from the test (FailNext, SetFailure, SetTokenFailure, SetLatency,
// RevokeTokens) and every request is counted, so a test can assert how many calls a client made.
package gcefake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// DefaultProject is the project a server knows when Start is given no WithProjects option.
const DefaultProject = "phe-test"

// DefaultPageSize is the page size of the real API when a request gives no maxResults.
const DefaultPageSize = 500

// maxPageSize is the largest maxResults the real API accepts.
const maxPageSize = 500

// DefaultZones are the zones every project reports, with a NO_RESULTS_ON_PAGE warning when
// none of their instances is on the page, like the real API lists every zone of every region.
var DefaultZones = []string{"europe-west1-b", "us-central1-a", "us-central1-b"}

// GrantTypeJWTBearer is the grant type of the service-account (two-legged) OAuth flow.
const GrantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// Option configures a Server at Start.
type Option func(*Server)

// WithProjects sets the projects the server knows (default: DefaultProject). Requests for any
// other project answer 404 like a project that does not exist.
func WithProjects(projects ...string) Option {
	return func(s *Server) {
		s.projects = map[string]*project{}
		for _, p := range projects {
			s.ensureProject(p)
		}
	}
}

// WithZones sets the zones every project reports (default: DefaultZones). Zones given to
// AddInstances are added to their project as well.
func WithZones(zones ...string) Option {
	return func(s *Server) { s.zones = slices.Clone(zones) }
}

// WithTokenLifetime sets the lifetime of the access tokens the token endpoint issues
// (default one hour, like Google's).
func WithTokenLifetime(d time.Duration) Option {
	return func(s *Server) { s.tokenLifetime = d }
}

// Server is a running GCE wire server with its token endpoint. All methods are safe for
// concurrent use.
type Server struct {
	srv    *httptest.Server
	closed chan struct{}

	mu            sync.Mutex
	zones         []string
	projects      map[string]*project
	tokenLifetime time.Duration
	keys          map[string]*serviceAccount // by client email
	tokens        map[string]time.Time       // access token -> expiry
	tokenEmail    map[string]string          // access token -> the service account it was issued to
	issued        []string                   // every access token ever issued, in order
	failNext      []failure
	failure       int
	rateLimit     string
	emptyPages    bool
	endless       bool
	tokenFailure  int
	latency       time.Duration
	tokenLatency  time.Duration
	instancesReqs int
	tokenReqs     int
	inFlight      int
	lastQuery     url.Values
	nextID        uint64
}

type project struct {
	name      string
	zones     map[string]bool
	instances []*instance // kept sorted by zone, then name
}

type instance struct {
	ID     uint64
	Name   string
	Zone   string
	Labels map[string]string
}

// Start starts a server on 127.0.0.1 and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		closed:        make(chan struct{}),
		zones:         slices.Clone(DefaultZones),
		projects:      map[string]*project{},
		tokenLifetime: time.Hour,
		keys:          map[string]*serviceAccount{},
		tokens:        map[string]time.Time{},
		tokenEmail:    map[string]string{},
		nextID:        1000000000000000000,
	}
	s.ensureProject(DefaultProject)
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /compute/v1/projects/{project}/aggregated/instances", s.serveInstances)
	mux.HandleFunc("POST /token", s.serveToken)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server: requests held by SetLatency end at once. Start registers it with
// t.Cleanup; calling it twice is harmless.
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		return
	default:
		close(s.closed)
	}
	s.mu.Unlock()
	s.srv.Close()
}

// URL is the API endpoint to give a client (option.WithEndpoint), e.g. http://127.0.0.1:PORT.
func (s *Server) URL() string { return s.srv.URL }

// TokenURL is the OAuth token endpoint; the keys ServiceAccountKey writes point at it.
func (s *Server) TokenURL() string { return s.srv.URL + "/token" }

// AddProject makes a project known (empty, with the server's zones).
func (s *Server) AddProject(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensureProject(name)
}

func (s *Server) ensureProject(name string) *project {
	if p, ok := s.projects[name]; ok {
		return p
	}
	p := &project{name: name, zones: map[string]bool{}}
	s.projects[name] = p
	return p
}

// AddInstances adds n running instances to a zone of a project (both created when unknown),
// each carrying the given labels, and returns their names.
func (s *Server) AddInstances(projectName, zone string, n int, labels map[string]string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.ensureProject(projectName)
	p.zones[zone] = true
	names := make([]string, 0, n)
	for range n {
		s.nextID++
		inst := &instance{
			ID:     s.nextID,
			Name:   fmt.Sprintf("vm-%s-%d", zone, s.nextID),
			Zone:   zone,
			Labels: cloneLabels(labels),
		}
		p.instances = append(p.instances, inst)
		names = append(names, inst.Name)
	}
	sort.Slice(p.instances, func(i, j int) bool {
		a, b := p.instances[i], p.instances[j]
		if a.Zone != b.Zone {
			return a.Zone < b.Zone
		}
		return a.Name < b.Name
	})
	return names
}

func cloneLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// failure is one queued error answer; an empty reason is the usual one for the status.
type failure struct {
	code   int
	reason string
	// echo quotes the request's Authorization header in the error message.
	echo bool
}

// Reasons GCE gives, with status 403, to a request over a rate quota (its API-quota
// documentation): the project's rate, or one user's.
const (
	ReasonRateLimitExceeded     = "rateLimitExceeded"
	ReasonUserRateLimitExceeded = "userRateLimitExceeded"
)

// FailNext makes the next instances request answer with this HTTP status and Google's error
// body (401, 403, 404, 429, 500, 503, ...). Calls queue up: each fails one request.
func (s *Server) FailNext(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, failure{code: code})
}

// EchoAuthorizationNext makes the next instances request answer with this HTTP status and an
// error message that quotes the request's Authorization header (the bearer token) between
// terminal escape sequences, as a debugging proxy or a broken gateway in front of the API may:
// what a client must not pass on as it is. Calls queue up with FailNext's.
func (s *Server) EchoAuthorizationNext(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, failure{code: code, echo: true})
}

// RateLimitNext makes the next instances request answer as GCE answers a request over a rate
// quota: status 403 with reason (ReasonRateLimitExceeded or ReasonUserRateLimitExceeded) in
// the error body. Calls queue up with FailNext's.
func (s *Server) RateLimitNext(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, failure{code: http.StatusForbidden, reason: reason})
}

// SetRateLimited makes every instances request answer as RateLimitNext does (403 with reason in
// the error body) until SetRateLimited(""): a quota that stays exceeded for a while.
func (s *Server) SetRateLimited(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimit = reason
}

// SetEmptyPages makes every instances answer a page without any item (no instance, no scope)
// that still carries a nextPageToken, until SetEmptyPages(false). A client that follows tokens
// until a page holds an item never stops.
func (s *Server) SetEmptyPages(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emptyPages = on
}

// SetEndlessAnswer makes every instances request answer 200 with a JSON body that never ends
// (written as fast as the client reads it, until it goes away), until SetEndlessAnswer(false).
func (s *Server) SetEndlessAnswer(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endless = on
}

// SetFailure makes every instances request answer with this status until SetFailure(0).
func (s *Server) SetFailure(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failure = code
}

// SetTokenFailure makes the token endpoint refuse every exchange with this status and an
// OAuth error body (400 invalid_grant, 401 invalid_client, 403 access_denied, 5xx) until
// SetTokenFailure(0).
func (s *Server) SetTokenFailure(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenFailure = code
}

// SetLatency delays every instances request by d before it is answered. A request whose client
// goes away, or a server that closes, ends the wait early.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// SetTokenLatency delays every token exchange by d, like SetLatency.
func (s *Server) SetTokenLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenLatency = d
}

// RevokeTokens forgets every access token issued so far: clients holding one get 401 until
// they exchange their assertion again.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
}

// InstancesRequests counts the requests made to the instances endpoint, answered or not.
func (s *Server) InstancesRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instancesReqs
}

// TokenRequests counts the requests made to the token endpoint, successful or not.
func (s *Server) TokenRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReqs
}

// InFlight counts the instances requests being served right now (e.g. held by SetLatency).
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// LastQuery is the query of the last instances request (nil before the first).
func (s *Server) LastQuery() url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastQuery == nil {
		return nil
	}
	q := url.Values{}
	for k, v := range s.lastQuery {
		q[k] = slices.Clone(v)
	}
	return q
}

// TokenInfo answers as Google's tokeninfo endpoint does for an access token: the email of the
// service account it was issued to, when it is one this server issued, not revoked and not
// expired. A token-review webhook built on it authenticates these tokens as GKE does.
func (s *Server) TokenInfo(token string) (email string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.tokens[token]
	if !ok || !time.Now().Before(exp) {
		return "", false
	}
	return s.tokenEmail[token], true
}

// IssuedTokens lists every access token the token endpoint has issued, oldest first, so that
// tests can look for them where they must not appear.
func (s *Server) IssuedTokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.issued)
}

// serveInstances answers instances.aggregatedList.
func (s *Server) serveInstances(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.instancesReqs++
	s.inFlight++
	s.lastQuery = r.URL.Query()
	latency := s.latency
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if !s.wait(r, latency) {
		return
	}

	if !s.validToken(r) {
		writeError(w, http.StatusUnauthorized, "")
		return
	}
	s.mu.Lock()
	fail := failure{code: s.failure}
	if s.rateLimit != "" {
		fail = failure{code: http.StatusForbidden, reason: s.rateLimit}
	}
	if len(s.failNext) > 0 {
		fail, s.failNext = s.failNext[0], s.failNext[1:]
	}
	emptyPages, endless := s.emptyPages, s.endless
	s.mu.Unlock()
	projectName := r.PathValue("project")
	switch {
	case endless:
		testutil.EndlessBody("application/json", `{"kind":"compute#instanceAggregatedList","id":"`)(w, r)
		return
	case fail.echo:
		writeErrorMessage(w, fail.code, "invalid", "gateway rejected \x1b[31mAuthorization: "+r.Header.Get("Authorization")+"\x1b[0m\r\nretry later")
		return
	case fail.reason != "":
		writeRateLimited(w, fail.code, fail.reason)
		return
	case fail.code != 0:
		writeError(w, fail.code, projectName)
		return
	}

	q := r.URL.Query()
	pageSize := DefaultPageSize
	if v := q.Get("maxResults"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxPageSize {
			writeErrorMessage(w, http.StatusBadRequest, "invalid",
				fmt.Sprintf("Invalid value for field 'maxResults': '%s'. Must be in the range [0, %d].", v, maxPageSize))
			return
		}
		if n > 0 {
			pageSize = n
		}
	}
	match, err := parseFilter(q.Get("filter"))
	if err != nil {
		writeErrorMessage(w, http.StatusBadRequest, "invalid",
			fmt.Sprintf("Invalid value for field 'filter': '%s'. Invalid list filter expression.", q.Get("filter")))
		return
	}
	offset := 0
	if tok := q.Get("pageToken"); tok != "" {
		if offset, err = decodePageToken(tok, q.Get("filter")); err != nil {
			writeErrorMessage(w, http.StatusBadRequest, "invalid",
				fmt.Sprintf("Invalid value for field 'pageToken': '%s'. Supplied pageToken is invalid.", tok))
			return
		}
	}

	s.mu.Lock()
	p, ok := s.projects[projectName]
	if !ok {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, projectName)
		return
	}
	zones := map[string]bool{}
	for _, z := range s.zones {
		zones[z] = true
	}
	for z := range p.zones {
		zones[z] = true
	}
	var matched []*instance
	for _, inst := range p.instances {
		if match(inst) && !emptyPages {
			matched = append(matched, inst)
		}
	}
	s.mu.Unlock()

	body := aggregatedList{
		Kind:     "compute#instanceAggregatedList",
		ID:       "projects/" + projectName + "/aggregated/instances",
		Items:    map[string]scopedList{},
		SelfLink: "https://www.googleapis.com/compute/v1/projects/" + projectName + "/aggregated/instances",
	}
	end := min(offset+pageSize, len(matched))
	if offset > len(matched) {
		offset = len(matched)
	}
	page := matched[offset:end]
	for _, inst := range page {
		key := "zones/" + inst.Zone
		sl := body.Items[key]
		sl.Instances = append(sl.Instances, inst.json(projectName))
		body.Items[key] = sl
	}
	for z := range zones {
		if emptyPages {
			break // not even the scopes' warnings: a page without any item
		}
		key := "zones/" + z
		if _, ok := body.Items[key]; ok {
			continue
		}
		body.Items[key] = scopedList{Warning: &warning{
			Code:    "NO_RESULTS_ON_PAGE",
			Message: fmt.Sprintf("There are no results for scope '%s' on this page.", key),
			Data:    []warningData{{Key: "scope", Value: key}},
		}}
	}
	if end < len(matched) || emptyPages {
		body.NextPageToken = encodePageToken(offset+pageSize, q.Get("filter"))
	}
	writeJSON(w, http.StatusOK, body)
}

// wait holds a request for d; false when the client went away or the server closes first.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closed:
		return false
	}
}

func (s *Server) validToken(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.tokens[tok]
	return ok && time.Now().Before(exp)
}

// The wire types of instances.aggregatedList (the fields clients read).
type aggregatedList struct {
	Kind          string                `json:"kind"`
	ID            string                `json:"id"`
	Items         map[string]scopedList `json:"items"`
	NextPageToken string                `json:"nextPageToken,omitempty"`
	SelfLink      string                `json:"selfLink"`
}

type scopedList struct {
	Instances []instanceJSON `json:"instances,omitempty"`
	Warning   *warning       `json:"warning,omitempty"`
}

type warning struct {
	Code    string        `json:"code"`
	Message string        `json:"message"`
	Data    []warningData `json:"data"`
}

type warningData struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type instanceJSON struct {
	Kind              string            `json:"kind"`
	ID                string            `json:"id"` // uint64 travels as a string in Google's JSON
	CreationTimestamp string            `json:"creationTimestamp"`
	Name              string            `json:"name"`
	Zone              string            `json:"zone"`
	MachineType       string            `json:"machineType"`
	Status            string            `json:"status"`
	Labels            map[string]string `json:"labels,omitempty"`
	SelfLink          string            `json:"selfLink"`
}

func (i *instance) json(projectName string) instanceJSON {
	zoneURL := "https://www.googleapis.com/compute/v1/projects/" + projectName + "/zones/" + i.Zone
	return instanceJSON{
		Kind:              "compute#instance",
		ID:                strconv.FormatUint(i.ID, 10),
		CreationTimestamp: "2026-01-01T00:00:00.000-08:00",
		Name:              i.Name,
		Zone:              zoneURL,
		MachineType:       zoneURL + "/machineTypes/e2-small",
		Status:            "RUNNING",
		Labels:            i.Labels,
		SelfLink:          zoneURL + "/instances/" + i.Name,
	}
}

// Page tokens are opaque to clients; this one carries the offset and the filter it belongs to,
// so a token reused with another filter is refused like the real API does.
func encodePageToken(offset int, filter string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(offset) + "\x00" + filter))
}

func decodePageToken(tok, filter string) (int, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, fmt.Errorf("decode page token: %w", err)
	}
	off, f, ok := strings.Cut(string(raw), "\x00")
	if !ok || f != filter {
		return 0, fmt.Errorf("page token does not belong to this filter")
	}
	n, err := strconv.Atoi(off)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad page token offset %q", off)
	}
	return n, nil
}

// A filter term: labels.KEY = VALUE, labels.KEY != VALUE, name = VALUE or status = VALUE, the
// value bare or double-quoted, the term optionally parenthesised. Terms joined by whitespace
// or AND must all hold, as in the compute list filter syntax.
var termRE = regexp.MustCompile(`^\(?\s*(labels\.[a-z][a-z0-9_-]*|name|status)\s*(!=|=)\s*("[^"]*"|[A-Za-z0-9_.*-]+)\s*\)?`)

func parseFilter(f string) (func(*instance) bool, error) {
	type term struct {
		field, value string
		negate       bool
	}
	var terms []term
	rest := strings.TrimSpace(f)
	for rest != "" {
		m := termRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("unsupported filter syntax at %q", rest)
		}
		if strings.HasPrefix(m[0], "(") != strings.HasSuffix(m[0], ")") {
			return nil, fmt.Errorf("unbalanced parenthesis at %q", rest)
		}
		terms = append(terms, term{field: m[1], value: strings.Trim(m[3], `"`), negate: m[2] == "!="})
		rest = strings.TrimSpace(rest[len(m[0]):])
		if after, ok := strings.CutPrefix(rest, "AND "); ok {
			rest = strings.TrimSpace(after)
			if rest == "" {
				return nil, fmt.Errorf("dangling AND")
			}
		}
	}
	return func(i *instance) bool {
		for _, t := range terms {
			var got string
			var present bool
			switch {
			case t.field == "name":
				got, present = i.Name, true
			case t.field == "status":
				got, present = "RUNNING", true
			default:
				got, present = i.Labels[strings.TrimPrefix(t.field, "labels.")]
			}
			eq := present && globMatch(t.value, got)
			if eq == t.negate {
				return false
			}
		}
		return true
	}, nil
}

// globMatch supports the trailing * wildcard of the compute filter syntax.
func globMatch(pattern, s string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(s, p)
	}
	return pattern == s
}

// googleError is the JSON error body every Google API answers with.
type googleError struct {
	Error googleErrorBody `json:"error"`
}

type googleErrorBody struct {
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Errors  []googleErrorItem `json:"errors"`
	Status  string            `json:"status"`
}

type googleErrorItem struct {
	Domain       string `json:"domain"`
	Reason       string `json:"reason"`
	Message      string `json:"message"`
	Location     string `json:"location,omitempty"`
	LocationType string `json:"locationType,omitempty"`
}

// writeError answers with the error body compute v1 sends for this status.
func writeError(w http.ResponseWriter, code int, projectName string) {
	reason, msg := "backendError", "Internal error. Please try again or contact Google Support."
	switch code {
	case http.StatusBadRequest:
		reason, msg = "invalid", "Invalid value for field 'project'."
	case http.StatusUnauthorized:
		reason, msg = "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
	case http.StatusForbidden:
		reason, msg = "forbidden", fmt.Sprintf("Required 'compute.instances.list' permission for 'projects/%s'", projectName)
	case http.StatusNotFound:
		reason, msg = "notFound", fmt.Sprintf("The resource 'projects/%s' was not found", projectName)
	case http.StatusTooManyRequests:
		reason, msg = "rateLimitExceeded", "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service 'compute.googleapis.com' for consumer 'project_number:123456789012'."
	case http.StatusServiceUnavailable:
		reason, msg = "backendError", "The service is currently unavailable."
	}
	writeErrorMessage(w, code, reason, msg)
}

// writeRateLimited answers as compute v1 answers a request over a rate quota: a 403 (not only
// a 429) whose error item carries the reason, in the usageLimits domain.
func writeRateLimited(w http.ResponseWriter, code int, reason string) {
	const msg = "Rate Limit Exceeded"
	writeJSON(w, code, googleError{Error: googleErrorBody{
		Code:    code,
		Message: msg,
		Errors:  []googleErrorItem{{Domain: "usageLimits", Reason: reason, Message: msg}},
		Status:  statusName(code),
	}})
}

func writeErrorMessage(w http.ResponseWriter, code int, reason, msg string) {
	item := googleErrorItem{Domain: "global", Reason: reason, Message: msg}
	if code == http.StatusUnauthorized {
		item.Location, item.LocationType = "Authorization", "header"
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/"`)
	}
	writeJSON(w, code, googleError{Error: googleErrorBody{
		Code:    code,
		Message: msg,
		Errors:  []googleErrorItem{item},
		Status:  statusName(code),
	}})
}

// statusName is the google.rpc.Code name Google's error body carries for an HTTP status.
func statusName(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if code >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	// The client may have gone away; there is nobody left to tell.
	_ = json.NewEncoder(w).Encode(v)
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
