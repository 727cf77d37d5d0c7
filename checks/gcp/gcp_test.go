package gcp_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/checkertest"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

const project = gcefake.DefaultProject

var managed = map[string]string{"managed-by": "proxy-operator"}

// provider is a providers-file entry as the loader hands it over (default filter filled in).
func provider(s *gcefake.Server, keyPath string) config.Provider {
	return config.Provider{Name: "gcp-test", Type: "gcp", Block: &gcp.Config{
		Project:         project,
		CredentialsFile: keyPath,
		Filter:          gcp.DefaultFilter,
		Endpoint:        s.URL(),
	}}
}

func newChecker(t testing.TB, p config.Provider, logger *slog.Logger) checks.Checker {
	t.Helper()
	c, err := gcp.New(p, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if cl, ok := c.(interface{ Close() error }); ok {
			_ = cl.Close()
		}
	})
	return c
}

// check runs one check with a deadline and verifies the invariants every result must hold.
func check(t testing.TB, c checks.Checker, timeout time.Duration) checks.TargetResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rs := c.Check(ctx)
	if len(rs) != 1 {
		t.Fatalf("Check returned %d results, want 1: %+v", len(rs), rs)
	}
	r := rs[0]
	if r.Target != c.Targets()[0] || r.Up != (r.Reason == checks.ReasonReady) ||
		!checks.ValidReason(gcp.Type, r.Reason) || r.CheckedAt.IsZero() || r.Message == "" {
		t.Errorf("result breaks the contract: %+v", r)
	}
	return r
}

func TestNewAndIdentity(t *testing.T) {
	s := gcefake.Start(t)
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	if c.Name() != "gcp-test" || c.Type() != gcp.Type || len(c.Targets()) != 1 || c.Targets()[0] != project {
		t.Errorf("identity: %s %s %v", c.Name(), c.Type(), c.Targets())
	}
	for name, p := range map[string]config.Provider{
		"no gcp block": {Name: "x", Type: "gcp"},
		"no project":   {Name: "x", Type: "gcp", Block: &gcp.Config{}},
		"bad endpoint": {Name: "x", Type: "gcp", Block: &gcp.Config{Project: "p", Endpoint: "ftp://host"}},
		"no host":      {Name: "x", Type: "gcp", Block: &gcp.Config{Project: "p", Endpoint: "https://"}},
	} {
		if _, err := gcp.New(p, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, p.Block)
		}
	}
	// An unreadable key is not an error of New: it is a verdict of every check.
	p := provider(s, filepath.Join(t.TempDir(), "missing.json"))
	if _, err := gcp.New(p, nil); err != nil {
		t.Errorf("New with an unreadable key: %v, want nil", err)
	}
}

func TestReady(t *testing.T) {
	s := gcefake.Start(t)
	s.AddInstances(project, "us-east1-b", 3, managed)
	s.AddInstances(project, "us-east1-c", 3, map[string]string{"managed-by": "other"})
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)

	r := check(t, c, 5*time.Second)
	if r.Reason != checks.ReasonReady || !strings.Contains(r.Message, "matching instance") {
		t.Fatalf("got %s: %s", r.Reason, r.Message)
	}
	if s.InstancesRequests() != 1 || s.TokenRequests() != 1 {
		t.Errorf("requests: instances %d, token %d; want 1 and 1", s.InstancesRequests(), s.TokenRequests())
	}
	q := s.LastQuery()
	if q.Get("maxResults") != "1" || q.Get("filter") != gcp.DefaultFilter || q.Has("pageToken") {
		t.Errorf("query = %v, want maxResults=1 and the default filter", q)
	}

	// Ready too when nothing matches: the API answered and the identity may list.
	p := provider(s, s.ServiceAccountKey(t))
	p.Block.(*gcp.Config).Filter = `labels.managed-by = "nobody"`
	r = check(t, newChecker(t, p, nil), 5*time.Second)
	if r.Reason != checks.ReasonReady || !strings.Contains(r.Message, "no instance matches") {
		t.Errorf("no match: got %s: %s", r.Reason, r.Message)
	}
}

// TestApplicationDefaultCredentials checks the empty credentialsFile: ADC from
// GOOGLE_APPLICATION_CREDENTIALS.
func TestApplicationDefaultCredentials(t *testing.T) {
	s := gcefake.Start(t)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", s.ServiceAccountKey(t))
	r := check(t, newChecker(t, provider(s, ""), nil), 5*time.Second)
	if r.Reason != checks.ReasonReady || s.TokenRequests() != 1 {
		t.Errorf("ADC: got %s (%s), token requests %d", r.Reason, r.Message, s.TokenRequests())
	}
	// The key the environment names is redacted from every message, as a configured one.
	checks.RefreshSecrets()
	for _, line := range privateKeyLines(t, os.Getenv("GOOGLE_APPLICATION_CREDENTIALS")) {
		if got := checks.Sanitize("quoted " + line); got != "quoted "+checks.Redacted {
			t.Errorf("a line of the ADC key reads %q, want it redacted", got)
			break
		}
	}
}

// TestKeyAppearingLater: a key that is missing at New is loaded by a later check.
func TestKeyAppearingLater(t *testing.T) {
	s := gcefake.Start(t)
	path := filepath.Join(t.TempDir(), "key.json")
	c := newChecker(t, provider(s, path), nil)
	r := check(t, c, 5*time.Second)
	if r.Reason != checks.ReasonCredentialsError || s.TokenRequests()+s.InstancesRequests() != 0 {
		t.Fatalf("missing key: got %s (%s), %d requests", r.Reason, r.Message, s.TokenRequests()+s.InstancesRequests())
	}
	copyFile(t, s.ServiceAccountKey(t), path)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("after the key appeared: got %s: %s", r.Reason, r.Message)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// rewriteKey writes a copy of a key file with one field changed.
func rewriteKey(t *testing.T, path, field, value string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m[field] = value
	b, _ = json.Marshal(m)
	out := filepath.Join(t.TempDir(), "rewritten.json")
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// closedAddr is a loopback address nothing listens on (connections are refused).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// closingListener accepts TCP connections and closes each at once, before any answer.
func closingListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
	})
	return l.Addr().String()
}

// TestReasons produces every reason of the gcp catalogue from the wire server or its token
// endpoint, through the real service-account flow.
func TestReasons(t *testing.T) {
	cases := []struct {
		name string
		// setup prepares the server and returns the provider to check.
		setup   func(t *testing.T, s *gcefake.Server) config.Provider
		want    checks.Reason
		msgPart string
		// instances is how many instances requests the check must have made.
		instances int
		// tune, when set, adjusts the checker before its check.
		tune func(c checks.Checker)
	}{
		{"ready", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonReady, "answered", 1, nil},
		{"key file missing", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, filepath.Join(t.TempDir(), "nope.json"))
		}, checks.ReasonCredentialsError, "no such file", 0, nil},
		{"key file not a service-account key", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, rewriteKey(t, s.ServiceAccountKey(t), "type", "authorized_user"))
		}, checks.ReasonCredentialsError, "credentials not loaded", 0, nil},
		{"private key does not parse", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, rewriteKey(t, s.ServiceAccountKey(t), "private_key",
				"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"))
		}, checks.ReasonCredentialsError, "private_key is neither a PKCS#8 nor a PKCS#1 private key", 0, nil},
		{"key file not JSON", func(t *testing.T, s *gcefake.Server) config.Provider {
			path := filepath.Join(t.TempDir(), "key.pem")
			if err := os.WriteFile(path, []byte("-----BEGIN PRIVATE KEY-----\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return provider(s, path)
		}, checks.ReasonCredentialsError, "is not a JSON service-account key", 0, nil},
		{"key unknown to the token endpoint", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, s.UntrustedServiceAccountKey(t))
		}, checks.ReasonCredentialsError, "invalid_grant: Invalid JWT Signature.", 0, nil},
		{"token endpoint refuses (400)", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetTokenFailure(400)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonCredentialsError, "token endpoint answered 400 invalid_grant", 0, nil},
		{"token endpoint refuses (401)", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetTokenFailure(401)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonCredentialsError, "invalid_client", 0, nil},
		{"token endpoint fails (503)", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetTokenFailure(503)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonCredentialsError, "503", 0, nil},
		{"token endpoint unreachable", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, rewriteKey(t, s.ServiceAccountKey(t), "token_uri", "http://"+closedAddr(t)+"/token"))
		}, checks.ReasonAPIUnreachable, "token endpoint unreachable", 0, nil},
		{"401", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.FailNext(401)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonUnauthorized, "answered 401", 1, nil},
		{"403", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetFailure(403)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonForbidden, "compute.instances.list", 1, nil},
		{"unknown project", func(t *testing.T, s *gcefake.Server) config.Provider {
			p := provider(s, s.ServiceAccountKey(t))
			p.Block.(*gcp.Config).Project = "no-such-project"
			return p
		}, gcp.ReasonProjectNotFound, "projects/no-such-project", 1, nil},
		{"404", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetFailure(404)
			return provider(s, s.ServiceAccountKey(t))
		}, gcp.ReasonProjectNotFound, "answered 404", 1, nil},
		{"429", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetFailure(429)
			return provider(s, s.ServiceAccountKey(t))
		}, gcp.ReasonRateLimited, "Quota exceeded", 1, nil},
		// GCE answers a rate quota with 403: not an IAM problem.
		{"403 rateLimitExceeded", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.RateLimitNext(gcefake.ReasonRateLimitExceeded)
			return provider(s, s.ServiceAccountKey(t))
		}, gcp.ReasonRateLimited, "answered 403: Rate Limit Exceeded (rateLimitExceeded)", 1, nil},
		{"403 userRateLimitExceeded", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.RateLimitNext(gcefake.ReasonUserRateLimitExceeded)
			return provider(s, s.ServiceAccountKey(t))
		}, gcp.ReasonRateLimited, "(userRateLimitExceeded)", 1, nil},
		{"500", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetFailure(500)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonAPIError, "answered 500", 1, nil},
		// 503 is retried by some SDK calls; this check must still make one request.
		{"503", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetFailure(503)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonAPIError, "answered 503", 1, nil},
		{"invalid filter", func(t *testing.T, s *gcefake.Server) config.Provider {
			p := provider(s, s.ServiceAccountKey(t))
			p.Block.(*gcp.Config).Filter = "labels.team ~ a"
			return p
		}, checks.ReasonAPIError, "Invalid value for field 'filter'", 1, nil},
		{"API unreachable", func(t *testing.T, s *gcefake.Server) config.Provider {
			p := provider(s, s.ServiceAccountKey(t))
			p.Block.(*gcp.Config).Endpoint = "http://" + closedAddr(t)
			return p
		}, checks.ReasonAPIUnreachable, "connection refused", 0, nil},
		{"API closes the connection at once", func(t *testing.T, s *gcefake.Server) config.Provider {
			p := provider(s, s.ServiceAccountKey(t))
			p.Block.(*gcp.Config).Endpoint = "http://" + closingListener(t)
			return p
		}, checks.ReasonAPIUnreachable, "before an answer", 0, nil},
		{"TLS handshake times out", func(t *testing.T, s *gcefake.Server) config.Provider {
			p := provider(s, s.ServiceAccountKey(t))
			p.Block.(*gcp.Config).Endpoint = "https://" + checkertest.Silent(t)
			return p
		}, checks.ReasonAPIUnreachable, "TLS handshake timed out", 0, func(c checks.Checker) {
			// Well inside the round's deadline (3s): the transport's bound, not the round's.
			gcp.SetConnectTimeouts(c, 10*time.Second, 300*time.Millisecond)
		}},
		{"connect times out", func(t *testing.T, s *gcefake.Server) config.Provider {
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonAPIUnreachable, "connect timed out", 0, func(c checks.Checker) {
			// A connect bound that has passed before the connect starts: the dial times out
			// at once, on the way to the token endpoint.
			gcp.SetConnectTimeouts(c, time.Nanosecond, 10*time.Second)
		}},
		{"slow API", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetLatency(5 * time.Second)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonTimeout, "the Compute API did not answer", 1, nil},
		{"slow token endpoint", func(t *testing.T, s *gcefake.Server) config.Provider {
			s.SetTokenLatency(5 * time.Second)
			return provider(s, s.ServiceAccountKey(t))
		}, checks.ReasonTimeout, "the OAuth token exchange did not finish", 0, nil},
	}
	produced := map[checks.Reason]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := gcefake.Start(t)
			s.AddInstances(project, "us-east1-b", 2, managed)
			c := newChecker(t, tc.setup(t, s), nil)
			if tc.tune != nil {
				tc.tune(c)
			}
			r := check(t, c, 3*time.Second)
			t.Logf("%s: %s (%v)", r.Reason, r.Message, r.Duration.Round(time.Millisecond))
			if r.Reason != tc.want || !strings.Contains(r.Message, tc.msgPart) {
				t.Errorf("got %s: %q; want %s containing %q", r.Reason, r.Message, tc.want, tc.msgPart)
			}
			if got := s.InstancesRequests(); got != tc.instances {
				t.Errorf("instances requests = %d, want %d", got, tc.instances)
			}
			produced[r.Reason] = true
		})
	}
	for _, reason := range checks.Reasons(gcp.Type) {
		// Maintenance is the runner's, from the operator's label (checks/maintenance_test.go).
		if !produced[reason] && reason != checks.ReasonMaintenance {
			t.Errorf("reason %s is in the gcp catalogue but no case produced it", reason)
		}
	}
}

// TestOneRequestPerCheckOnEmptyPages: a server answering pages without an item but with a
// nextPageToken (which a Pager follows until it finds an item) gets exactly one request per
// check, and none after the check returned, whether the check ends Ready or at its deadline.
func TestOneRequestPerCheckOnEmptyPages(t *testing.T) {
	s := gcefake.Start(t)
	s.AddInstances(project, "us-east1-b", 3, managed)
	s.SetEmptyPages(true)
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	for i := 1; i <= 3; i++ {
		r := check(t, c, 5*time.Second)
		if r.Reason != checks.ReasonReady || !strings.Contains(r.Message, "no instance matches") {
			t.Errorf("check %d: got %s: %s; want Ready with no instance on the page", i, r.Reason, r.Message)
		}
		if got := s.InstancesRequests(); got != i {
			t.Fatalf("after check %d: %d instances requests, want %d", i, got, i)
		}
	}
	// A slow server: the check is abandoned at its deadline; the call must not page on.
	s.SetLatency(300 * time.Millisecond)
	if r := check(t, c, 100*time.Millisecond); r.Reason != checks.ReasonTimeout {
		t.Errorf("slow empty page: got %s: %s; want Timeout", r.Reason, r.Message)
	}
	s.SetLatency(0)
	// Wait until the abandoned request has been answered (or cut), then give a follow-up
	// page every chance to be requested.
	for s.InFlight() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if got := s.InstancesRequests(); got != 4 {
		t.Errorf("after an abandoned check: %d instances requests, want 4 (one per check)", got)
	}
}

// TestRevokedTokenIsUnauthorized: a token the API no longer accepts is a real 401, and the
// next check exchanges a fresh token instead of presenting the refused one again.
func TestRevokedTokenIsUnauthorized(t *testing.T) {
	s := gcefake.Start(t)
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Fatalf("got %s: %s", r.Reason, r.Message)
	}
	s.RevokeTokens()
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonUnauthorized {
		t.Errorf("revoked token: got %s: %s", r.Reason, r.Message)
	}
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("check after the 401: got %s: %s; want Ready with a fresh token", r.Reason, r.Message)
	}
	if s.TokenRequests() != 2 {
		t.Errorf("token requests = %d, want 2 (one before, one after the 401)", s.TokenRequests())
	}
}

// TestTimeoutAtTheDeadline: a slow API gives Timeout at the deadline, and the abandoned call
// is cut by the HTTP client's timeout instead of running until the server answers.
func TestTimeoutAtTheDeadline(t *testing.T) {
	s := gcefake.Start(t)
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	// Fetch the token first, so the slow part is the instances call alone.
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Fatalf("got %s: %s", r.Reason, r.Message)
	}
	const latency = 10 * time.Second
	const deadline = time.Second
	s.SetLatency(latency)
	start := time.Now()
	r := check(t, c, deadline)
	elapsed := time.Since(start)
	if r.Reason != checks.ReasonTimeout || !strings.Contains(r.Message, "the Compute API did not answer") {
		t.Errorf("got %s: %s", r.Reason, r.Message)
	}
	// The contract, not a speed measurement: a check returns by its deadline plus the
	// runner's largest grace (500ms).
	if elapsed > deadline+500*time.Millisecond {
		t.Errorf("Check returned after %v with a %v deadline (server latency %v)", elapsed, deadline, latency)
	}
	// The abandoned request must end well before the server would have answered.
	for s.InFlight() != 0 && time.Since(start) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.InFlight(); n != 0 {
		t.Errorf("%d request(s) still in flight %v after the deadline: the abandoned call was not cut", n, time.Since(start))
	}
	s.SetLatency(0)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("after the latency is gone: got %s: %s", r.Reason, r.Message)
	}
	if s.InstancesRequests() != 3 {
		t.Errorf("instances requests = %d, want 3", s.InstancesRequests())
	}
}

func TestNoRequestWhenContextDone(t *testing.T) {
	s := gcefake.Start(t)
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, ctx := range []context.Context{cancelled, expired} {
		rs := c.Check(ctx)
		if len(rs) != 1 || rs[0].Reason != checks.ReasonTimeout || rs[0].Up {
			t.Errorf("got %+v, want one Timeout", rs)
		}
	}
	if s.InstancesRequests() != 0 || s.TokenRequests() != 0 {
		t.Errorf("requests: instances %d, token %d; want none", s.InstancesRequests(), s.TokenRequests())
	}
}

func fleet(t testing.TB) (*gcefake.Server, string) {
	s := gcefake.Start(t)
	for z := range 50 {
		s.AddInstances(project, fmt.Sprintf("zone-%02d-a", z), 200, managed)
	}
	return s, s.ServiceAccountKey(t)
}

// TestOneRequestPerCheckOnALargeFleet: 10,000 instances across 50 zones, and still one
// instances request per check and one token request per token lifetime.
func TestOneRequestPerCheckOnALargeFleet(t *testing.T) {
	s, key := fleet(t)
	c := newChecker(t, provider(s, key), nil)
	for i := 1; i <= 2; i++ {
		if r := check(t, c, 10*time.Second); r.Reason != checks.ReasonReady {
			t.Fatalf("check %d: got %s: %s", i, r.Reason, r.Message)
		}
		if s.InstancesRequests() != i {
			t.Errorf("after %d checks: %d instances requests", i, s.InstancesRequests())
		}
	}
	if s.TokenRequests() != 1 {
		t.Errorf("token requests = %d after two checks within one token lifetime, want 1", s.TokenRequests())
	}
}

// TestNoSecretsInMessagesOrLogs runs the flows that touch credentials and looks for the access
// tokens and the private keys in every result message and log line.
func TestNoSecretsInMessagesOrLogs(t *testing.T) {
	s := gcefake.Start(t)
	s.AddInstances(project, "us-east1-b", 1, managed)
	var logs testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var messages []string
	run := func(c checks.Checker, timeout time.Duration) {
		messages = append(messages, check(t, c, timeout).Message)
	}

	good := s.ServiceAccountKey(t)
	untrusted := s.UntrustedServiceAccountKey(t)
	keys := []string{good, untrusted}

	c := newChecker(t, provider(s, good), logger)
	run(c, 5*time.Second) // Ready, a token issued
	// A gateway quoting the request's bearer token between escape sequences: the message
	// says what happened, without the token or a control character.
	s.EchoAuthorizationNext(400)
	run(c, 5*time.Second)
	if echoed := messages[len(messages)-1]; !strings.Contains(echoed, "Authorization: Bearer [redacted]") ||
		strings.ContainsAny(echoed, "\x1b\r\n") {
		t.Errorf("the echoed token's message = %q, want it redacted and without control characters", echoed)
	}
	s.FailNext(401)
	run(c, 5*time.Second)
	s.SetFailure(403)
	run(c, 5*time.Second)
	s.SetFailure(0)
	s.SetLatency(2 * time.Second)
	run(c, 200*time.Millisecond)
	s.SetLatency(0)
	s.RevokeTokens()
	run(c, 5*time.Second) // 401 with the revoked token
	run(newChecker(t, provider(s, untrusted), logger), 5*time.Second)
	s.SetTokenFailure(400)
	run(newChecker(t, provider(s, good), logger), 5*time.Second)
	s.SetTokenFailure(0)
	run(newChecker(t, provider(s, rewriteKey(t, good, "type", "authorized_user")), logger), 5*time.Second)
	bad := provider(s, good)
	bad.Block.(*gcp.Config).Endpoint = "http://" + closedAddr(t)
	run(newChecker(t, bad, logger), 5*time.Second)

	tokens := s.IssuedTokens()
	if len(tokens) == 0 {
		t.Fatal("no token was issued: the test proves nothing")
	}
	haystack := strings.Join(messages, "\n") + "\n" + logs.String()
	if !strings.Contains(logs.String(), "gcp check done") {
		t.Fatal("the debug logs are empty: the test proves nothing")
	}
	for _, tok := range tokens {
		if strings.Contains(haystack, tok) || strings.Contains(haystack, strings.TrimPrefix(tok, "ya29.")) {
			t.Errorf("access token %s… appears in messages or logs", tok[:12])
		}
	}
	for _, k := range keys {
		for _, secret := range privateKeyLines(t, k) {
			if strings.Contains(haystack, secret) {
				t.Errorf("private key material of %s appears in messages or logs", filepath.Base(k))
				break
			}
		}
	}
	if strings.Contains(haystack, "PRIVATE KEY") {
		t.Error("a PEM header appears in messages or logs")
	}
}

// TestPlainHTTPRefused: an http:// endpoint that is not loopback would send the bearer token in
// clear: the providers file is refused, naming the file, the line and the field, unless
// insecureAllowHTTP allows it, which is a warning at every load. Loopback needs no opt-out. A
// key whose token_uri is plain HTTP to another host is a CredentialsError, and no request is
// made.
func TestPlainHTTPRefused(t *testing.T) {
	file := func(block string) string {
		return "providers:\n  - name: g\n    type: gcp\n    gcp:\n      project: my-project\n" + block
	}
	_, err := config.Parse("/etc/phe/providers.yml", []byte(file("      endpoint: http://compute.example.com\n")))
	if err == nil || !strings.Contains(err.Error(), "/etc/phe/providers.yml:6") || !strings.Contains(err.Error(), "endpoint") ||
		!strings.Contains(err.Error(), "insecureAllowHTTP") {
		t.Errorf("an http endpoint to another host: %v; want an error at providers.yml:6 naming endpoint and insecureAllowHTTP", err)
	}
	_, err = config.Parse("/etc/phe/providers.yml", []byte(file("      endpoint: http://me:hunter22@compute.example.com\n")))
	if err == nil || strings.Contains(err.Error(), "hunter22") {
		t.Errorf("an http endpoint with a password: %v; want an error that does not quote the password", err)
	}
	for _, ok := range []string{
		"      endpoint: https://compute.example.com\n",
		"      endpoint: http://127.0.0.1:8080\n",
		"      endpoint: http://localhost:8080\n",
		"      endpoint: http://[::1]:8080\n",
	} {
		cfg, err := config.Parse("/etc/phe/providers.yml", []byte(file(ok)))
		if err != nil {
			t.Errorf("%s: %v", strings.TrimSpace(ok), err)
		} else if w := cfg.Warnings(); len(w) != 0 {
			t.Errorf("%s: warnings %q, want none", strings.TrimSpace(ok), w)
		}
	}
	cfg, err := config.Parse("/etc/phe/providers.yml", []byte(file("      endpoint: http://compute.example.com\n      insecureAllowHTTP: true\n")))
	if err != nil {
		t.Fatalf("insecureAllowHTTP: %v", err)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], `"g"`) || !strings.Contains(w[0], "insecureAllowHTTP") {
		t.Errorf("insecureAllowHTTP: warnings %q, want one naming the provider and the option", w)
	}
	if _, err := gcp.New(config.Provider{Name: "g", Type: "gcp", Block: &gcp.Config{Project: "p", Endpoint: "http://198.18.0.1"}}, nil); err == nil {
		t.Error("New accepted an http endpoint to another host")
	}

	s := gcefake.Start(t)
	c := newChecker(t, provider(s, rewriteKey(t, s.ServiceAccountKey(t), "token_uri", "http://198.18.0.1/token")), nil)
	r := check(t, c, 5*time.Second)
	if r.Reason != checks.ReasonCredentialsError || !strings.Contains(r.Message, "token_uri") || !strings.Contains(r.Message, "in clear") {
		t.Errorf("a plain-http token_uri: %s (%s), want CredentialsError naming token_uri", r.Reason, r.Message)
	}
	if n := s.TokenRequests() + s.InstancesRequests(); n != 0 {
		t.Errorf("%d requests were made with a plain-http token_uri, want none", n)
	}
}

// privateKeyLines returns the base64 lines of a key file's PEM body (and the base64 of each
// line's JSON-escaped form is the same text).
func privateKeyLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(f.PrivateKey, "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 10 {
		t.Fatalf("key %s: %d PEM lines, want a real RSA key", path, len(lines))
	}
	return lines
}

// BenchmarkCheckVsDrain counts, over a fleet of 10,000 instances in 50 zones, the instances
// requests of one check against a naive drain of the SDK iterator (the server's default page
// size), side by side in the same run.
func BenchmarkCheckVsDrain(b *testing.B) {
	s, key := fleet(b)
	b.Run("check", func(b *testing.B) {
		c := newChecker(b, provider(s, key), nil)
		check(b, c, 10*time.Second) // the token exchange happens once per token lifetime
		reqs, toks := s.InstancesRequests(), s.TokenRequests()
		for b.Loop() {
			if r := check(b, c, 10*time.Second); r.Reason != checks.ReasonReady {
				b.Fatalf("got %s: %s", r.Reason, r.Message)
			}
		}
		b.ReportMetric(float64(s.InstancesRequests()-reqs)/float64(b.N), "requests/op")
		b.ReportMetric(float64(s.TokenRequests()-toks)/float64(b.N), "token-requests/op")
	})
	b.Run("drain", func(b *testing.B) {
		client, err := compute.NewInstancesRESTClient(context.Background(),
			option.WithEndpoint(s.URL()), option.WithAuthCredentialsFile(option.ServiceAccount, key))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = client.Close() }()
		req := &computepb.AggregatedListInstancesRequest{Project: project, Filter: proto.String(gcp.DefaultFilter)}
		if n := drainCount(b, client, req); n != 10000 {
			b.Fatalf("drained %d instances, want 10000", n)
		}
		reqs, toks := s.InstancesRequests(), s.TokenRequests()
		for b.Loop() {
			drainCount(b, client, req)
		}
		b.ReportMetric(float64(s.InstancesRequests()-reqs)/float64(b.N), "requests/op")
		b.ReportMetric(float64(s.TokenRequests()-toks)/float64(b.N), "token-requests/op")
	})
}

func drainCount(b *testing.B, c *compute.InstancesClient, req *computepb.AggregatedListInstancesRequest) int {
	it := c.AggregatedList(context.Background(), req)
	n := 0
	for {
		p, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
		n += len(p.Value.GetInstances())
	}
}

// TestClassifyTransportFailures: failures before any answer, as net/http hands them back, are
// APIUnreachable with a message that says what happened; other failures stay APIError.
func TestClassifyTransportFailures(t *testing.T) {
	get := func(err error) error {
		return &url.Error{Op: "Get", URL: "https://compute.example/compute/v1/projects/p/aggregated/instances", Err: err}
	}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name    string
		err     error
		want    checks.Reason
		msgPart string
	}{
		{"reset", get(reset), checks.ReasonAPIUnreachable, "connection reset before an answer"},
		{"EOF", get(io.EOF), checks.ReasonAPIUnreachable, "connection closed before an answer: EOF"},
		{"unexpected EOF", get(io.ErrUnexpectedEOF), checks.ReasonAPIUnreachable, "connection closed before an answer"},
		{"TLS alert", get(tls.AlertError(40)), checks.ReasonAPIUnreachable, "TLS handshake refused"},
		{"not a transport failure", errors.New("create compute client: bad option"), checks.ReasonAPIError, "bad option"},
	} {
		reason, msg := gcp.Classify(tc.err)
		if reason != tc.want || !strings.Contains(msg, tc.msgPart) {
			t.Errorf("%s: got %s %q; want %s containing %q", tc.name, reason, msg, tc.want, tc.msgPart)
		}
		if strings.Contains(msg, "compute.example") {
			t.Errorf("%s: message %q quotes the request URL", tc.name, msg)
		}
	}
}

// TestEndlessAnswer: an instances answer that never ends (200, a body written as fast as it is
// read) gives APIError naming the cut, long before the check's deadline, and the heap stays
// flat: the body is cut at checks.MaxAnswerSize.
func TestEndlessAnswer(t *testing.T) {
	s := gcefake.Start(t)
	c := newChecker(t, provider(s, s.ServiceAccountKey(t)), nil)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Fatalf("got %s: %s", r.Reason, r.Message)
	}
	s.SetEndlessAnswer(true)
	peak := testutil.PeakHeap(t, func() {
		const deadline = 30 * time.Second
		start := time.Now()
		r := check(t, c, deadline)
		if r.Reason != checks.ReasonAPIError || !strings.Contains(r.Message, "larger than 4 MiB") {
			t.Errorf("got %s (%q), want APIError saying the answer was cut", r.Reason, r.Message)
		}
		if took := time.Since(start); took >= deadline {
			t.Errorf("the check ran out its %s deadline: the body was not cut by size", deadline)
		}
	})
	if peak > 200<<20 {
		t.Errorf("heap in use peaked at %d MiB during the check, want under 200 MiB", peak>>20)
	}
	s.SetEndlessAnswer(false)
	if r := check(t, c, 5*time.Second); r.Reason != checks.ReasonReady {
		t.Errorf("after the endless answers stopped: got %s: %s", r.Reason, r.Message)
	}
}
