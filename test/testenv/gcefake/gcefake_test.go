package gcefake

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/auth"
	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"
)

var managed = map[string]string{"managed-by": "proxy-operator"}

// newClient is the real SDK client, authenticated with the real service-account JWT flow.
func newClient(t *testing.T, s *Server, keyPath string) *compute.InstancesClient {
	t.Helper()
	c, err := compute.NewInstancesRESTClient(context.Background(),
		option.WithEndpoint(s.URL()),
		option.WithAuthCredentialsFile(option.ServiceAccount, keyPath))
	if err != nil {
		t.Fatalf("NewInstancesRESTClient: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSmokeServiceAccountFlow is the smoke test of the GCE part: a service-account JWT
// exchange through the real SDK, then one page of instances.
func TestSmokeServiceAccountFlow(t *testing.T) {
	s := Start(t)
	s.AddInstances(DefaultProject, "us-east1-b", 3, managed)
	s.AddInstances(DefaultProject, "us-west1-a", 2, managed)
	c := newClient(t, s, s.ServiceAccountKey(t))

	it := c.AggregatedList(context.Background(), &computepb.AggregatedListInstancesRequest{
		Project:    DefaultProject,
		MaxResults: proto.Uint32(1),
	})
	var page []compute.InstancesScopedListPair
	next, err := iterator.NewPager(it, 1, "").NextPage(&page)
	if err != nil {
		t.Fatalf("NextPage: %v", err)
	}
	if next == "" {
		t.Error("5 instances and a page of 1: want a next page token")
	}
	var instances, warnings int
	scopes := map[string]bool{}
	for _, p := range page {
		scopes[p.Key] = true
		instances += len(p.Value.GetInstances())
		if w := p.Value.GetWarning(); w != nil {
			warnings++
			if w.GetCode() != "NO_RESULTS_ON_PAGE" {
				t.Errorf("scope %s: warning code %q", p.Key, w.GetCode())
			}
			if d := w.GetData(); len(d) != 1 || d[0].GetKey() != "scope" || d[0].GetValue() != p.Key {
				t.Errorf("scope %s: warning data %v", p.Key, d)
			}
		}
	}
	if instances != 1 {
		t.Errorf("instances on the page = %d, want 1", instances)
	}
	// The default zones plus the two zones holding instances, each reported once.
	if want := len(DefaultZones) + 2; len(scopes) != want || warnings != want-1 {
		t.Errorf("scopes = %d (warnings %d), want %d scopes, %d warnings: %v", len(scopes), warnings, want, want-1, scopes)
	}
	if got := s.TokenRequests(); got != 1 {
		t.Errorf("token requests = %d, want 1", got)
	}
	if got := s.InstancesRequests(); got != 1 {
		t.Errorf("instances requests = %d, want 1", got)
	}
	if q := s.LastQuery(); q.Get("maxResults") != "1" {
		t.Errorf("last query = %v, want maxResults=1", q)
	}
	if len(s.IssuedTokens()) != 1 {
		t.Errorf("issued tokens = %d, want 1", len(s.IssuedTokens()))
	}
}

func drain(t *testing.T, c *compute.InstancesClient, req *computepb.AggregatedListInstancesRequest) (names []string, err error) {
	t.Helper()
	it := c.AggregatedList(context.Background(), req)
	for {
		p, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return names, nil
		}
		if err != nil {
			return names, err
		}
		for _, inst := range p.Value.GetInstances() {
			names = append(names, inst.GetName())
		}
	}
}

func TestPagingVisitsEveryInstanceOnce(t *testing.T) {
	s := Start(t)
	var want []string
	want = append(want, s.AddInstances(DefaultProject, "asia-east1-a", 3, managed)...)
	want = append(want, s.AddInstances(DefaultProject, "us-east1-b", 4, managed)...)
	c := newClient(t, s, s.ServiceAccountKey(t))

	got, err := drain(t, c, &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(2)})
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	seen := map[string]int{}
	for _, n := range got {
		seen[n]++
	}
	for _, n := range want {
		if seen[n] != 1 {
			t.Errorf("instance %s seen %d times, want once", n, seen[n])
		}
	}
	if len(got) != len(want) {
		t.Errorf("drained %d instances, want %d", len(got), len(want))
	}
	if r := s.InstancesRequests(); r != 4 { // ceil(7/2)
		t.Errorf("instances requests = %d, want 4", r)
	}

	// Without maxResults the server pages by DefaultPageSize.
	s.AddInstances(DefaultProject, "us-east1-c", DefaultPageSize, managed)
	before := s.InstancesRequests()
	got, err = drain(t, c, &computepb.AggregatedListInstancesRequest{Project: DefaultProject})
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if len(got) != DefaultPageSize+7 || s.InstancesRequests()-before != 2 {
		t.Errorf("default page size: %d instances in %d requests, want %d in 2", len(got), s.InstancesRequests()-before, DefaultPageSize+7)
	}
}

func TestFilterOnLabels(t *testing.T) {
	s := Start(t)
	s.AddInstances(DefaultProject, "us-east1-b", 3, map[string]string{"managed-by": "proxy-operator", "team": "a"})
	s.AddInstances(DefaultProject, "us-east1-c", 2, map[string]string{"managed-by": "proxy-operator", "team": "b"})
	s.AddInstances(DefaultProject, "us-east1-d", 4, map[string]string{"managed-by": "someone-else"})
	c := newClient(t, s, s.ServiceAccountKey(t))

	for filter, want := range map[string]int{
		"":                                     9,
		"labels.managed-by=proxy-operator":     5,
		`labels.managed-by = "proxy-operator"`: 5,
		`labels.managed-by="proxy-operator"`:   5,
		`(labels.managed-by = "proxy-operator") (labels.team = "a")`:  3,
		`labels.managed-by = "proxy-operator" AND labels.team != "a"`: 2,
		`labels.managed-by = "proxy-*"`:                               5,
		`labels.absent = "x"`:                                         0,
	} {
		req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject}
		if filter != "" {
			req.Filter = proto.String(filter)
		}
		got, err := drain(t, c, req)
		if err != nil {
			t.Errorf("filter %q: %v", filter, err)
			continue
		}
		if len(got) != want {
			t.Errorf("filter %q: %d instances, want %d", filter, len(got), want)
		}
		if q := s.LastQuery().Get("filter"); q != filter {
			t.Errorf("filter %q reached the server as %q", filter, q)
		}
	}

	for _, bad := range []string{"labels.team ~ a", "zone = us-east1-b", "(labels.team = a", "labels.team = a AND"} {
		_, err := drain(t, c, &computepb.AggregatedListInstancesRequest{Project: DefaultProject, Filter: proto.String(bad)})
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != http.StatusBadRequest {
			t.Errorf("filter %q: err = %v, want a googleapi 400", bad, err)
			continue
		}
		if len(gerr.Errors) != 1 || gerr.Errors[0].Reason != "invalid" || !strings.Contains(gerr.Message, "filter") {
			t.Errorf("filter %q: error body %+v", bad, gerr)
		}
	}
}

// TestErrorBodies checks Google's error body for every forced status, through the SDK and raw.
func TestErrorBodies(t *testing.T) {
	s := Start(t)
	key := s.ServiceAccountKey(t)
	c := newClient(t, s, key)
	req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(1)}

	for code, reason := range map[int]string{
		401: "authError", 403: "forbidden", 404: "notFound", 429: "rateLimitExceeded", 500: "backendError", 503: "backendError",
	} {
		s.FailNext(code)
		_, err := drain(t, c, req)
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) {
			t.Errorf("FailNext(%d): err = %v, want *googleapi.Error", code, err)
			continue
		}
		if gerr.Code != code || len(gerr.Errors) != 1 || gerr.Errors[0].Reason != reason || gerr.Message == "" {
			t.Errorf("FailNext(%d): got code %d errors %+v message %q", code, gerr.Code, gerr.Errors, gerr.Message)
		}
		var body struct {
			Error struct {
				Code   int    `json:"code"`
				Status string `json:"status"`
				Errors []struct {
					Domain string `json:"domain"`
				} `json:"errors"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(gerr.Body), &body); err != nil || body.Error.Code != code ||
			body.Error.Status == "" || len(body.Error.Errors) != 1 || body.Error.Errors[0].Domain != "global" {
			t.Errorf("FailNext(%d): raw body %s (%v)", code, gerr.Body, err)
		}
	}
	// FailNext fails one request only.
	if _, err := drain(t, c, req); err != nil {
		t.Errorf("after FailNext: %v", err)
	}
	s.SetFailure(503)
	for range 2 {
		if _, err := drain(t, c, req); !isCode(err, 503) {
			t.Errorf("SetFailure(503): err = %v", err)
		}
	}
	s.SetFailure(0)
	if _, err := drain(t, c, req); err != nil {
		t.Errorf("after SetFailure(0): %v", err)
	}

	// An unknown project is a real 404.
	if _, err := drain(t, c, &computepb.AggregatedListInstancesRequest{Project: "no-such-project"}); !isCode(err, 404) {
		t.Errorf("unknown project: err = %v, want 404", err)
	}

	// Without a token, or with one the server did not issue, the API answers 401.
	for _, authz := range []string{"", "Bearer made-up", "Basic Zm9vOmJhcg=="} {
		r, _ := http.NewRequest("GET", s.URL()+"/compute/v1/projects/"+DefaultProject+"/aggregated/instances", nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(b), `"UNAUTHENTICATED"`) {
			t.Errorf("authorization %q: %d %s", authz, resp.StatusCode, b)
		}
	}
	// A revoked token is refused until the client exchanges its assertion again.
	s.RevokeTokens()
	if _, err := drain(t, c, req); !isCode(err, 401) {
		t.Errorf("revoked token: err = %v, want 401", err)
	}
}

func isCode(err error, code int) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && gerr.Code == code
}

func TestTokenEndpointVerifiesTheAssertion(t *testing.T) {
	s := Start(t)
	req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(1)}

	// A key the server never made: the signature does not verify.
	c := newClient(t, s, s.UntrustedServiceAccountKey(t))
	_, err := drain(t, c, req)
	var aerr *auth.Error
	if !errors.As(err, &aerr) || aerr.Response == nil || aerr.Response.StatusCode != 400 ||
		!strings.Contains(string(aerr.Body), "Invalid JWT Signature.") {
		t.Errorf("untrusted key: err = %v, want an auth.Error 400 invalid_grant", err)
	}
	if s.InstancesRequests() != 0 {
		t.Errorf("instances requests = %d without a token, want 0", s.InstancesRequests())
	}

	// Forced failures of the token endpoint.
	keyPath := s.ServiceAccountKey(t)
	for code, oauthCode := range map[int]string{400: "invalid_grant", 401: "invalid_client", 403: "access_denied", 500: "internal_failure", 503: "temporarily_unavailable"} {
		s.SetTokenFailure(code)
		_, err := drain(t, newClient(t, s, keyPath), req)
		var aerr *auth.Error
		if !errors.As(err, &aerr) || aerr.Response == nil || aerr.Response.StatusCode != code || !strings.Contains(string(aerr.Body), oauthCode) {
			t.Errorf("SetTokenFailure(%d): err = %v", code, err)
		}
	}
	s.SetTokenFailure(0)
	if _, err := drain(t, newClient(t, s, keyPath), req); err != nil {
		t.Errorf("after SetTokenFailure(0): %v", err)
	}

	// Hand-made assertions: the endpoint checks grant type, audience, lifetime and scope.
	key, email, kid := readKey(t, keyPath)
	now := time.Now()
	good := jwtClaims{Iss: email, Scope: "https://www.googleapis.com/auth/compute.readonly", Aud: s.TokenURL(), Iat: now.Unix(), Exp: now.Add(time.Hour).Unix()}
	cases := []struct {
		name      string
		grantType string
		claims    jwtClaims
		status    int
		errCode   string
	}{
		{"valid", GrantTypeJWTBearer, good, 200, ""},
		{"wrong grant type", "client_credentials", good, 400, "unsupported_grant_type"},
		{"wrong audience", GrantTypeJWTBearer, with(good, func(c *jwtClaims) { c.Aud = "https://oauth2.googleapis.com/token" }), 400, "invalid_grant"},
		{"expired", GrantTypeJWTBearer, with(good, func(c *jwtClaims) { c.Iat, c.Exp = now.Add(-3*time.Hour).Unix(), now.Add(-2*time.Hour).Unix() }), 400, "invalid_grant"},
		{"too long-lived", GrantTypeJWTBearer, with(good, func(c *jwtClaims) { c.Exp = now.Add(3 * time.Hour).Unix() }), 400, "invalid_grant"},
		{"unknown issuer", GrantTypeJWTBearer, with(good, func(c *jwtClaims) { c.Iss = "nobody@example.iam.gserviceaccount.com" }), 400, "invalid_grant"},
		{"no scope", GrantTypeJWTBearer, with(good, func(c *jwtClaims) { c.Scope = "" }), 400, "invalid_scope"},
	}
	for _, tc := range cases {
		resp, err := http.PostForm(s.TokenURL(), url.Values{"grant_type": {tc.grantType}, "assertion": {sign(t, key, kid, tc.claims)}})
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d (%v), want %d", tc.name, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.status == 200 {
			if body["token_type"] != "Bearer" || body["access_token"] == "" || body["expires_in"] == nil {
				t.Errorf("%s: body %v", tc.name, body)
			}
		} else if body["error"] != tc.errCode {
			t.Errorf("%s: error %v, want %s", tc.name, body["error"], tc.errCode)
		}
	}
	// A tampered signature.
	parts := strings.Split(sign(t, key, kid, good), ".")
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"` + email + `","scope":"x","aud":"` + s.TokenURL() + `","iat":1,"exp":2}`))
	resp, err := http.PostForm(s.TokenURL(), url.Values{"grant_type": {GrantTypeJWTBearer}, "assertion": {strings.Join(parts, ".")}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "Invalid JWT Signature.") {
		t.Errorf("tampered assertion: %d %s", resp.StatusCode, b)
	}
}

func with(c jwtClaims, f func(*jwtClaims)) jwtClaims { f(&c); return c }

func readKey(t *testing.T, path string) (*rsa.PrivateKey, string, string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f serviceAccountFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != "service_account" || f.ProjectID == "" || f.ClientEmail == "" || f.PrivateKeyID == "" {
		t.Fatalf("key file fields: %+v", f)
	}
	block, _ := pem.Decode([]byte(f.PrivateKey))
	if block == nil {
		t.Fatal("private_key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*rsa.PrivateKey), f.ClientEmail, f.PrivateKeyID
}

func sign(t *testing.T, key *rsa.PrivateKey, kid string, c jwtClaims) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid})
	p, _ := json.Marshal(c)
	unsigned := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	d := sha256.Sum256([]byte(unsigned))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	if err != nil {
		t.Fatal(err)
	}
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestLatencyAndAbandonedRequests checks that SetLatency holds requests and that a request
// whose client gives up stops being served.
func TestLatencyAndAbandonedRequests(t *testing.T) {
	s := Start(t)
	c := newClient(t, s, s.ServiceAccountKey(t))
	req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(1)}
	s.SetLatency(200 * time.Millisecond)
	start := time.Now()
	if _, err := drain(t, c, req); err != nil {
		t.Fatal(err)
	}
	// A lower bound: the server must have held the request at least this long.
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("request answered after %v, before the 200ms latency", d)
	}

	s.SetLatency(time.Minute)
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	_, err := hc.Get(s.URL() + "/compute/v1/projects/" + DefaultProject + "/aggregated/instances")
	if err == nil {
		t.Fatal("want a client timeout")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.InFlight(); n != 0 {
		t.Errorf("in flight = %d after the client went away, want 0", n)
	}
}

// TestRateLimitAnswersAsGCE: a rate quota is answered with 403 and the quota's reason in the
// usageLimits domain, as GCE does, not only with 429.
func TestRateLimitAnswersAsGCE(t *testing.T) {
	s := Start(t)
	c := newClient(t, s, s.ServiceAccountKey(t))
	req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(1)}
	for _, reason := range []string{ReasonRateLimitExceeded, ReasonUserRateLimitExceeded} {
		s.RateLimitNext(reason)
		_, err := drain(t, c, req)
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != http.StatusForbidden || len(gerr.Errors) != 1 ||
			gerr.Errors[0].Reason != reason || !strings.Contains(gerr.Body, `"domain":"usageLimits"`) {
			t.Errorf("RateLimitNext(%s): err %v", reason, err)
		}
	}
	if _, err := drain(t, c, req); err != nil {
		t.Errorf("after the rate-limited requests: %v", err)
	}
}

// TestSetRateLimitedHoldsUntilCleared: SetRateLimited answers every request as a rate quota
// does, until it is cleared.
func TestSetRateLimitedHoldsUntilCleared(t *testing.T) {
	s := Start(t)
	c := newClient(t, s, s.ServiceAccountKey(t))
	req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(1)}
	s.SetRateLimited(ReasonRateLimitExceeded)
	for i := range 2 {
		_, err := drain(t, c, req)
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != http.StatusForbidden || len(gerr.Errors) != 1 ||
			gerr.Errors[0].Reason != ReasonRateLimitExceeded {
			t.Errorf("request %d while rate limited: err %v", i, err)
		}
	}
	s.SetRateLimited("")
	if _, err := drain(t, c, req); err != nil {
		t.Errorf("after SetRateLimited(\"\"): %v", err)
	}
}

// TestEmptyPagesCarryAToken: with SetEmptyPages a page holds no item at all but a token, so
// whoever follows tokens until an item comes never stops; the one-page fetch makes one request.
func TestEmptyPagesCarryAToken(t *testing.T) {
	s := Start(t)
	s.AddInstances(DefaultProject, "us-east1-b", 2, nil)
	s.SetEmptyPages(true)
	c := newClient(t, s, s.ServiceAccountKey(t))
	req := &computepb.AggregatedListInstancesRequest{Project: DefaultProject, MaxResults: proto.Uint32(1)}
	items, token, err := c.AggregatedList(context.Background(), req).InternalFetch(1, "")
	if err != nil || len(items) != 0 || token == "" {
		t.Fatalf("empty page: %d items, token %q, err %v; want no item and a token", len(items), token, err)
	}
	if _, token2, err := c.AggregatedList(context.Background(), req).InternalFetch(1, token); err != nil || token2 == "" {
		t.Errorf("following the token: token %q, err %v; want another token", token2, err)
	}
	if n := s.InstancesRequests(); n != 2 {
		t.Errorf("%d instances requests, want 2", n)
	}
	s.SetEmptyPages(false)
	if names, err := drain(t, c, req); err != nil || len(names) != 2 {
		t.Errorf("after SetEmptyPages(false): %v, %v; want the 2 instances", names, err)
	}
}
