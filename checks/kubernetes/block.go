package kubernetes

import (
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

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
	{Reason: checks.ReasonReady, Meaning: "The API server answered the list request (at most one object) with the exporter's identity."},
	{Reason: checks.ReasonTimeout, Meaning: "The list request did not complete before the round's deadline (or the checker misbehaved; see the message)."},
	{Reason: checks.ReasonUnauthorized, Meaning: "The API server rejected the credentials (HTTP 401), or, with `auth: google`, Google's token endpoint refused the service-account key."},
	{Reason: checks.ReasonForbidden, Meaning: "The identity is known but RBAC does not allow listing the resource (HTTP 403)."},
	{Reason: ReasonResourceNotFound, Meaning: "The configured group/version/resource does not exist on this API server (HTTP 404)."},
	{Reason: checks.ReasonAPIUnreachable, Meaning: "No HTTP answer: DNS, TCP connect or TLS failed (refused, no route, certificate not trusted), or the connection was closed or reset before an answer."},
	{Reason: checks.ReasonAPIError, Meaning: "The API server answered with another error (5xx, unexpected status)."},
	{Reason: ReasonConfigError, Meaning: "The configuration could not be used."},
}

// The block's defaults, applied by the loader.
const (
	// DefaultLabelSelector is the labelSelector when the key is absent: the platform's
	// managed-by label. `labelSelector: ""` means no selector at all.
	DefaultLabelSelector = "app.kubernetes.io/managed-by=proxy-operator"
	// DefaultVersion and DefaultResource name what the check lists when neither is set: core
	// v1 pods.
	DefaultVersion  = "v1"
	DefaultResource = "pods"
)

// Config is the block of a `type: kubernetes` provider.
type Config struct {
	// Kubeconfig is an absolute path after loading; empty means in-cluster config.
	Kubeconfig string `yaml:"kubeconfig,omitempty"`
	// Context of the kubeconfig; empty means its current context.
	Context string `yaml:"context,omitempty"`
	// Group, Version and Resource name what the check lists (default: core v1 pods). After
	// loading Version and Resource are never empty; an empty Group is the core group.
	Group    string `yaml:"group,omitempty"`
	Version  string `yaml:"version,omitempty"`
	Resource string `yaml:"resource,omitempty"`
	// Namespace to list in; empty means all namespaces.
	Namespace string `yaml:"namespace,omitempty"`
	// LabelSelector restricts what is listed. After loading it is the selector to use: the
	// DefaultLabelSelector when the key was absent, empty (everything) when it was set to "".
	LabelSelector string `yaml:"labelSelector,omitempty"`
	// Auth is how the exporter authenticates: empty, the kubeconfig's user (or the pod's
	// service account in-cluster); AuthGoogle, a Google OAuth access token, which GKE's API
	// servers accept, with the kubeconfig naming the cluster only.
	Auth string `yaml:"auth,omitempty"`
	// CredentialsFile is a Google service-account key (absolute after loading), with AuthGoogle
	// only; empty means Application Default Credentials (Workload Identity on GKE).
	CredentialsFile string `yaml:"credentialsFile,omitempty"`
}

// AuthGoogle is `auth: google`: the exporter gets a Google OAuth access token itself (from a
// service-account key or Application Default Credentials) and presents it as the bearer token,
// as GKE's exec plugin gke-gcloud-auth-plugin would, with no plugin in the image.
const AuthGoogle = "google"

// Equal reports whether o is the same block.
func (k *Config) Equal(o config.Block) bool {
	ok, is := o.(*Config)
	return is && *k == *ok
}

// Files are the kubeconfig, when one is set, and the Google key: secrets (the kubeconfig may
// hold tokens and client keys).
func (k *Config) Files() []config.File {
	return []config.File{
		{Field: "kubeconfig", Path: k.Kubeconfig, Secret: true},
		{Field: "credentialsFile", Path: k.CredentialsFile, Secret: true},
	}
}

// Warnings: none; a kubeconfig's own insecure-skip-tls-verify is the kubeconfig's business.
func (k *Config) Warnings(string) []string { return nil }

func decode(f *config.Fields) config.Block {
	k := &Config{}
	k.Kubeconfig = f.File("kubeconfig", false, "")
	k.Context = f.String("context")

	group := f.String("group", func(group string) string {
		return validationProblem("invalid API group", group, validation.IsDNS1123Subdomain(group))
	})
	version := f.String("version", func(version string) string {
		return validationProblem("invalid API version", version, validation.IsDNS1035Label(version))
	})
	resource, rv := f.StringNode("resource", dnsLabel("resource"))
	if resource == "" && (group != "" || version != "") {
		if rv == nil {
			f.Errorf(nil, "resource", "missing required field (required when group or version is set)")
		} else {
			f.Errorf(rv, "resource", "must not be empty when group or version is set")
		}
	}
	k.Group = group
	k.Version = cmpOr(version, DefaultVersion)
	k.Resource = cmpOr(resource, DefaultResource)
	k.Namespace = f.String("namespace", dnsLabel("namespace"))

	k.LabelSelector = DefaultLabelSelector
	if f.Has("labelSelector") {
		k.LabelSelector = f.String("labelSelector", func(selector string) string {
			if _, err := labels.Parse(selector); err != nil {
				return "invalid label selector " + config.Quote(selector) + ": " + err.Error()
			}
			return ""
		})
	}

	auth, av := f.StringNode("auth", func(auth string) string {
		if auth != AuthGoogle {
			return "unknown auth " + config.Quote(auth) + ": want google, or leave the field out to use the kubeconfig's user"
		}
		return ""
	})
	k.Auth = auth
	k.CredentialsFile = f.File("credentialsFile", false, "")
	if k.CredentialsFile != "" && auth != AuthGoogle {
		f.Errorf(f.Key("credentialsFile"), "credentialsFile", "a Google service-account key is used with auth: google only (set it, or drop credentialsFile)")
	}
	if auth == AuthGoogle && k.Kubeconfig == "" {
		f.Errorf(av, "auth", "auth: google needs a kubeconfig naming the cluster (its server and certificate-authority); the in-cluster configuration has its own service account")
	}
	return k
}

// validationProblem is what an apimachinery validation said about s, "" when it said nothing.
func validationProblem(what, s string, msgs []string) string {
	if len(msgs) == 0 {
		return ""
	}
	return what + " " + config.Quote(s) + ": " + strings.Join(msgs, "; ")
}

// dnsLabel is the check of a field that must be a DNS-1123 label (config.DNSLabelProblem).
func dnsLabel(what string) config.Check {
	return func(s string) string { return config.DNSLabelProblem(what, s) }
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
