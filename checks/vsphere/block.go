package vsphere

import (
	"fmt"
	"log/slog"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

func init() {
	checks.Register(checks.Type{
		Name:    Type,
		Reasons: reasons,
		Block:   config.BlockType{Fields: config.YAMLKeys[Config](), Decode: decode},
		New:     newChecker,
		Gauges:  []*checks.Gauge{datastoreCapacity, datastoreFree, datastoreAccessible},
	})
}

// reasons is the type's catalogue; reasons.md beside this file (the type's section of
// docs/reasons.md) explains each and says what to do.
var reasons = []checks.ReasonInfo{
	{Reason: checks.ReasonReady, Meaning: "The vCenter's target: logged in (or the session kept from an earlier round is alive) and the inventory retrieval answered; with `datacenter`, the datacenter is in the inventory. A host's target: its `runtime.connectionState` is `connected` and it is not in maintenance mode."},
	{Reason: checks.ReasonTimeout, Meaning: "The round's deadline came first: connecting, logging in or the inventory call was still pending (the message says which), or the deadline had passed before the check started."},
	{Reason: checks.ReasonUnauthorized, Meaning: "vCenter refused the login (`InvalidLogin`, \"Login failure\", or `NoPermission`)."},
	{Reason: checks.ReasonAPIUnreachable, Meaning: "No answer: DNS, TCP connect refused or timed out, or the connection closed or reset before an answer."},
	{Reason: ReasonTLSError, Meaning: "The TLS handshake failed: the certificate is not signed by `caFile` (or by the system roots when `caFile` is empty), is not for the URL's host, is not valid, or the server does not speak TLS."},
	{Reason: ReasonDatacenterNotFound, Meaning: "No datacenter named `datacenter` is in the inventory the account sees."},
	{Reason: checks.ReasonCredentialsError, Meaning: "A credentials file cannot be used: `usernameFile` or `passwordFile` unreadable or empty, `caFile` unreadable or without a PEM certificate; nothing was sent."},
	{Reason: ReasonHostDisconnected, Meaning: "A host's `runtime.connectionState` is `disconnected`: vCenter does not manage it (a user disconnected it, or its license or management agent failed)."},
	{Reason: ReasonHostNotResponding, Meaning: "A host's `runtime.connectionState` is `notResponding`: vCenter stopped receiving the host's heartbeats (the host is down, isolated, or its management agent hangs)."},
	{Reason: checks.ReasonMaintenance, Meaning: "A host is in maintenance mode (`runtime.inMaintenanceMode`), or the target's `maintenance` label (a provider's or its own) is `true` or an end time not reached yet: deliberately out of service, so neither up nor counted as down, whatever its connection state."},
	{Reason: checks.ReasonAPIError, Meaning: "The server answered another fault, an unexpected HTTP status, or an answer that is not SOAP."},
}

// The type's own gauges, on the vCenter's target: each datastore of the inventory (of the
// configured datacenter), as the last retrieval read it. An inaccessible datastore has only its
// accessible series (vCenter's sizes for it are stale).
var (
	datastoreCapacity = &checks.Gauge{Name: checks.MetricNamespace + "_vsphere_datastore_capacity_bytes",
		Help: "Capacity of the vSphere datastore (summary.capacity), as read by the last check.", Labels: []string{"datacenter", "datastore"}}
	datastoreFree = &checks.Gauge{Name: checks.MetricNamespace + "_vsphere_datastore_free_bytes",
		Help: "Free space of the vSphere datastore (summary.freeSpace), as read by the last check.", Labels: []string{"datacenter", "datastore"}}
	datastoreAccessible = &checks.Gauge{Name: checks.MetricNamespace + "_vsphere_datastore_accessible",
		Help: "Whether the vSphere datastore is accessible (summary.accessible: 1 yes, 0 no), as read by the last check.", Labels: []string{"datacenter", "datastore"}}
)

// DatastoreSamples are the gauges' samples of one datastore: accessible, and the sizes only when
// it is accessible.
func DatastoreSamples(datacenter, name string, capacity, free int64, accessible bool) []checks.Sample {
	labels := []string{datacenter, name}
	if !accessible {
		return []checks.Sample{{Gauge: datastoreAccessible, Value: 0, LabelValues: labels}}
	}
	return []checks.Sample{
		{Gauge: datastoreAccessible, Value: 1, LabelValues: labels},
		{Gauge: datastoreCapacity, Value: float64(capacity), LabelValues: labels},
		{Gauge: datastoreFree, Value: float64(free), LabelValues: labels},
	}
}

// Reasons is the closed catalogue of the vsphere provider.
var Reasons = func() []checks.Reason {
	rs := make([]checks.Reason, len(reasons))
	for i, r := range reasons {
		rs[i] = r.Reason
	}
	return rs
}()

// newChecker is the registered constructor.
func newChecker(p config.Provider, logger *slog.Logger) (checks.Checker, error) {
	cfg, ok := p.Block.(*Config)
	if !ok || cfg == nil {
		return nil, fmt.Errorf("provider %q: type vsphere needs a vsphere block", p.Name)
	}
	return New(p.Name, cfg, logger)
}

// Equal reports whether o is the same block: a reload keeps the checker (and its session).
func (c *Config) Equal(o config.Block) bool {
	oc, is := o.(*Config)
	return is && oc != nil && *c == *oc
}

// Files are the credentials and the CA bundle (Path empty when caFile is not set).
func (c *Config) Files() []config.File {
	return []config.File{
		{Field: "usernameFile", Path: c.UsernameFile},
		{Field: "passwordFile", Path: c.PasswordFile, Secret: true},
		{Field: "caFile", Path: c.CAFile},
	}
}

// decode reads a vsphere block; every problem is placed at its file:line:col. It returns nil
// when the block is unusable.
func decode(f *config.Fields) config.Block {
	before := f.Problems()
	c := &Config{}
	c.URL = f.Required("url", " (an absolute https URL such as https://vcenter.example.com/sdk)", func(raw string) string {
		if _, err := ParseURL(raw); err != nil {
			// ParseURL's error never quotes a user part; the value is quoted only without one.
			return "invalid URL: " + err.Error()
		}
		return ""
	})
	c.UsernameFile = f.File("usernameFile", true, " (a file holding the username)")
	c.PasswordFile = f.File("passwordFile", true, " (a file holding the password)")
	c.CAFile = f.File("caFile", false, "")
	c.InsecureSkipTLSVerify = f.Bool("insecureSkipTLSVerify")
	c.Datacenter = f.String("datacenter")
	if f.Problems() != before {
		return nil
	}
	return c
}
