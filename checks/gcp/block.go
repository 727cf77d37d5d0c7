package gcp

import (
	"fmt"
	"net/url"
	"regexp"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

func init() {
	checks.Register(checks.Type{
		Name:    Type,
		Reasons: reasons,
		Block:   config.BlockType{Fields: config.YAMLKeys[Config](), Decode: decode},
		New:     New,
	})
}

// reasons is the type's catalogue; reasons.md beside this file (the type's section of
// docs/reasons.md) explains each and says what to do.
var reasons = []checks.ReasonInfo{
	{Reason: checks.ReasonReady, Meaning: "Compute Engine answered one page of at most one instance of `instances.aggregatedList` for the project."},
	{Reason: checks.ReasonTimeout, Meaning: "The round's deadline came first: loading the credentials, the token exchange or the Compute API call was still pending (the message says which), or the deadline had passed before the check started (or the checker misbehaved; see the message)."},
	{Reason: checks.ReasonCredentialsError, Meaning: "No token could be obtained: the service-account key is unreadable or invalid, Application Default Credentials are missing, or the token endpoint refused the exchange (including its 5xx)."},
	{Reason: checks.ReasonUnauthorized, Meaning: "The API rejected the token (HTTP 401)."},
	{Reason: checks.ReasonForbidden, Meaning: "The service account may not list instances in the project (HTTP 403), or the Compute API is disabled."},
	{Reason: ReasonProjectNotFound, Meaning: "The project does not exist or is not visible to the service account (HTTP 404)."},
	{Reason: ReasonRateLimited, Meaning: "The API refused the request for a rate quota (HTTP 429, or 403 with reason `rateLimitExceeded` / `userRateLimitExceeded`)."},
	{Reason: checks.ReasonAPIUnreachable, Meaning: "No HTTP answer from the API endpoint or the OAuth token endpoint (the key's `token_uri`): DNS, TCP connect or TLS failed, the connect or the TLS handshake timed out (10 s each, before the round's deadline), or the connection was closed or reset before an answer."},
	{Reason: checks.ReasonAPIError, Meaning: "The API answered with another error (5xx, unexpected response)."},
}

// DefaultFilter is the filter when the key is absent: the platform's managed-by label.
// `filter: ""` means no filter at all.
const DefaultFilter = "labels.managed-by=proxy-operator"

// Config is the block of a `type: gcp` provider.
type Config struct {
	// Project is the GCP project ID.
	Project string `yaml:"project"`
	// CredentialsFile is a service-account key path (absolute after loading); empty means
	// Application Default Credentials.
	CredentialsFile string `yaml:"credentialsFile,omitempty"`
	// Filter is an instances.aggregatedList filter expression. After loading it is the filter to
	// use: DefaultFilter when the key was absent, empty (no filter) when it was set to "".
	Filter string `yaml:"filter,omitempty"`
	// Endpoint overrides the Compute API endpoint: an absolute https URL, or http to a
	// loopback host (a local proxy or emulator), or http to any host with InsecureAllowHTTP.
	Endpoint string `yaml:"endpoint,omitempty"`
	// InsecureAllowHTTP lets Endpoint (and the key's token_uri) be plain HTTP to a host that is
	// not loopback, sending the bearer token (and the token exchange) in clear: an explicit
	// opt-out, logged as a warning at every load.
	InsecureAllowHTTP bool `yaml:"insecureAllowHTTP,omitempty"`
}

// Equal reports whether o is the same block.
func (g *Config) Equal(o config.Block) bool {
	og, is := o.(*Config)
	return is && *g == *og
}

// Files is the service-account key, when one is set.
func (g *Config) Files() []config.File {
	return []config.File{{Field: "credentialsFile", Path: g.CredentialsFile, Secret: true}}
}

// Warnings says that plain HTTP to any host is allowed, when it is.
func (g *Config) Warnings(provider string) []string {
	if !g.InsecureAllowHTTP {
		return nil
	}
	return []string{fmt.Sprintf("provider %q: plain HTTP to hosts other than loopback is allowed (insecureAllowHTTP: true): "+
		"an http:// endpoint or token_uri gets the bearer token and the token exchange in clear", provider)}
}

// PlainHTTPProblem says what is wrong with u as an endpoint that carries credentials: "" for
// https, for http to a loopback host, and for any http with insecure.
func PlainHTTPProblem(u *url.URL, insecure bool) string {
	if u.Scheme != "http" || insecure || config.LoopbackHost(u.Hostname()) {
		return ""
	}
	return "plain http to " + config.Quote(u.Host) + " would send the bearer token in clear (allowed: https, http to " +
		"localhost or a loopback address, or any http with insecureAllowHTTP: true)"
}

// projectID is the format of a GCP project ID.
var projectID = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

func decode(f *config.Fields) config.Block {
	g := &Config{}
	g.Project = f.Required("project", "", func(project string) string {
		if projectID.MatchString(project) {
			return ""
		}
		return "invalid project ID " + config.Quote(project) + ": must be 6 to 30 characters of a-z, 0-9 and '-', " +
			"starting with a letter and ending with a letter or digit"
	})
	g.CredentialsFile = f.File("credentialsFile", false, "")
	g.Filter = DefaultFilter
	if f.Has("filter") {
		g.Filter = f.String("filter")
	}
	g.InsecureAllowHTTP = f.Bool("insecureAllowHTTP")
	g.Endpoint = f.String("endpoint", func(endpoint string) string {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// Redacted: a user part's password is not quoted back.
			return "invalid endpoint " + config.Quote(checks.Redact(endpoint)) + ": must be an absolute http or https URL"
		}
		if p := PlainHTTPProblem(u, g.InsecureAllowHTTP); p != "" {
			return "invalid endpoint " + config.Quote(u.Redacted()) + ": " + p
		}
		return ""
	})
	return g
}
