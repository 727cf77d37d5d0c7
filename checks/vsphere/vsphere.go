// Package vsphere checks a vCenter Server (`type: vsphere`) through its SOAP API with
// github.com/vmware/govmomi: one logged-in session kept across rounds, and one inventory
// retrieval per round.
//
// The targets are the vCenter itself (its address) and every ESXi host of the inventory (of
// the datacenter `datacenter`, or of all datacenters when it is empty), each named as in the
// inventory. A host's verdict is its `runtime.connectionState` and `runtime.inMaintenanceMode`
// as vCenter reports them; the vCenter's target carries the datastores' gauges. The hosts are
// discovered: Targets lists those the last retrieval read.
//
// Calls per round, in the steady state: one RetrievePropertiesEx, a traversal from the root
// folder through the folders, the datacenters' host and datastore folders and the compute
// resources, reading the hosts, the datastores and the parents that place them in their
// datacenter, at most 1000 objects a call. Only an inventory of more than 1000 objects costs
// one more call per 1000 (ContinueRetrievePropertiesEx).
//
// A login costs two more calls (RetrieveServiceContent, then Login), only when there is no
// session: the first round, after the server dropped the session (NotAuthenticated, as a fault
// or, as the simulator answers, in the object's missingSet), and after the username, password or
// CA file changed (the old session is logged out first, best effort). A session found gone is
// replaced in the same round: the round logs in again and repeats the inventory call once, so
// its verdict is about the server now. Every login uses a new SOAP client, hence a new cookie
// jar: vCenter (and the simulator) refuse a Login on a request that still carries a session
// cookie.
//
// Every call is bounded by the round's context. govmomi's own TLS dial ignores the context, so
// the checker dials TLS itself (tls.Dialer with the round's deadline); Check also returns at the
// deadline whatever the call does, and the call, cut by the same deadline, ends right after.
package vsphere

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

var (
	_ checks.Closer       = (*Checker)(nil)
	_ checks.TargetProber = (*Checker)(nil)
)

// Type is the provider type of this package.
const Type checks.ProviderType = "vsphere"

// The reasons of the vsphere provider besides the shared ones.
const (
	// ReasonTLSError: the server's certificate is not trusted (not signed by caFile or the
	// system roots, or not for the URL's host), or the server does not speak TLS.
	ReasonTLSError checks.Reason = "TLSError"
	// ReasonDatacenterNotFound: the configured datacenter is not in the inventory.
	ReasonDatacenterNotFound checks.Reason = "DatacenterNotFound"
	// ReasonHostDisconnected: an ESXi host's runtime.connectionState is disconnected.
	ReasonHostDisconnected checks.Reason = "HostDisconnected"
	// ReasonHostNotResponding: an ESXi host's runtime.connectionState is notResponding.
	ReasonHostNotResponding checks.Reason = "HostNotResponding"
)

const (
	// callTimeoutWithoutDeadline bounds a round whose context has no deadline.
	callTimeoutWithoutDeadline = 30 * time.Second
	// dialTimeout bounds a TCP connect and TLS handshake when the round allows longer.
	dialTimeout = 10 * time.Second
	// logoutTimeout bounds the best-effort logout of Close and of a replaced session.
	logoutTimeout = 2 * time.Second
)

// pageSize is how many objects one inventory call reads (a variable for the tests).
var pageSize int32 = 1000

// Config is the providers-file block of a vsphere provider.
type Config struct {
	// URL is the SDK endpoint, an absolute https URL (https://vcenter.example.com/sdk); an
	// empty path means /sdk.
	URL string `yaml:"url"`
	// UsernameFile and PasswordFile hold the credentials; one trailing newline is trimmed.
	UsernameFile string `yaml:"usernameFile"`
	PasswordFile string `yaml:"passwordFile"`
	// CAFile is a PEM bundle that verifies the server; empty means the system roots.
	CAFile string `yaml:"caFile"`
	// InsecureSkipTLSVerify skips the verification of the server's certificate.
	InsecureSkipTLSVerify bool `yaml:"insecureSkipTLSVerify"`
	// Datacenter, when set, must exist; empty checks the inventory as a whole.
	Datacenter string `yaml:"datacenter"`
}

// Warnings is what the config loader says at every load of a provider with this block.
func (c *Config) Warnings(provider string) []string {
	if c.InsecureSkipTLSVerify {
		return []string{fmt.Sprintf("provider %q: vsphere.insecureSkipTLSVerify is true: the vCenter certificate is not verified, "+
			"so anyone on the path can read the password; set caFile instead", provider)}
	}
	return nil
}

// ParseURL checks a vsphere url: an absolute https URL with a host, and no user, query or
// fragment (credentials come from files). An empty path becomes /sdk.
func ParseURL(raw string) (*url.URL, error) {
	const want = "want an absolute https URL with a host, such as https://vcenter.example.com/sdk, without user, query or fragment"
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole input, which may hold a password in a user part: keep
		// only what is wrong.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%v: %s", err, want)
	}
	switch {
	case u.Scheme != "https":
		return nil, fmt.Errorf("scheme %q: %s", u.Scheme, want)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("no host: %s", want)
	case u.User != nil:
		// Say nothing of what the user part holds: it may be a password.
		return nil, fmt.Errorf("the URL carries a user part: %s (usernameFile and passwordFile hold the credentials)", want)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("query or fragment: %s", want)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q: %s", p, want)
		}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/sdk"
	}
	return u, nil
}

// TargetName is the one target of a provider with this URL: its host, lower-cased, and the
// port when it is not 443.
func TargetName(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" && p != "443" {
		return host + ":" + p
	}
	return host
}

// Checker checks one vsphere provider. It implements checks.Checker and io.Closer.
type Checker struct {
	name   string
	target string
	sdk    *url.URL
	cfg    Config
	logger *slog.Logger

	// turn is held by the round that makes calls (a 1-buffered token): one round's calls at a
	// time, and a round waits for an abandoned one only until its own deadline.
	turn chan struct{}

	closeOnce sync.Once
	closed    atomic.Bool
	// closing ends with Close: it cuts the calls of checks still running.
	closing checks.Closing

	// mu guards hosts: the names of the hosts the last inventory read, sorted.
	mu    sync.Mutex
	hosts []string

	// Held with turn:
	creds creds
	sess  *session
	// logins counts logins (a test's view of the session reuse).
	logins atomic.Int64
}

// creds is what the files said at the last read.
type creds struct {
	read                    bool
	user, pass              string
	pool                    *x509.CertPool // nil: the system roots
	userAt, passAt, caAt    checks.FileState
	gen                     int // changes when what the files say changes
	err                     error
	userRaw, passRaw, caRaw string
}

// session is one logged-in client.
type session struct {
	client *vim25.Client
	soap   *soap.Client
	gen    int // the creds generation it logged in with
}

// New returns the checker of a vsphere provider. It reads nothing and contacts nothing: the
// files are read at the first check.
func New(name string, cfg *Config, logger *slog.Logger) (*Checker, error) {
	if cfg == nil {
		return nil, fmt.Errorf("provider %q: type vsphere needs a vsphere block", name)
	}
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("provider %q: vsphere.url: %w", name, err)
	}
	if cfg.UsernameFile == "" || cfg.PasswordFile == "" {
		return nil, fmt.Errorf("provider %q: vsphere.usernameFile and vsphere.passwordFile are required", name)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Checker{name: name, target: TargetName(u), sdk: u, cfg: *cfg, logger: logger, turn: make(chan struct{}, 1)}
	c.turn <- struct{}{}
	return c, nil
}

// Name is the provider's name.
func (c *Checker) Name() string { return c.name }

// Type is "vsphere".
func (c *Checker) Type() checks.ProviderType { return Type }

// Targets are the vCenter's own target (the URL's host, and port when not 443) and the ESXi
// hosts the last inventory read.
func (c *Checker) Targets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string{c.target}, c.hosts...)
}

// Logins is how many logins the checker made so far.
func (c *Checker) Logins() int64 { return c.logins.Load() }

// Close logs the session out (bounded, best effort) and releases the connections. It does
// not wait for a check still running: it cuts that check's calls, and the check logs out when
// it ends. It is idempotent.
func (c *Checker) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closing.Close()
		select {
		case <-c.turn:
			c.release()
		default: // an abandoned check holds the turn; its release logs out
		}
	})
	return nil
}

// release gives the turn back; after Close, it logs out first.
func (c *Checker) release() {
	if c.closed.Load() && c.sess != nil {
		c.logout(context.Background(), c.sess)
		c.sess = nil
	}
	c.turn <- struct{}{}
}

// logout ends s server-side, within logoutTimeout and ctx, and closes its connections.
func (c *Checker) logout(ctx context.Context, s *session) {
	ctx, cancel := context.WithTimeout(ctx, logoutTimeout)
	defer cancel()
	ctx = withDialDeadline(ctx)
	if _, err := methods.Logout(ctx, s.client, &types.Logout{This: *s.client.ServiceContent.SessionManager}); err != nil {
		c.logger.Debug("vsphere logout failed", "target", c.target, "err", checks.Sanitize(describe(err)))
	}
	s.soap.CloseIdleConnections()
}

// Stages of a round, for the message of a Timeout.
const (
	stageWait int32 = iota
	stageCredentials
	stageConnect
	stageLogin
	stageInventory
	stageLogout
)

var stageNames = map[int32]string{
	stageWait:        "waiting for the previous check of this provider",
	stageCredentials: "reading the credentials",
	stageConnect:     "connecting (TCP, TLS, RetrieveServiceContent)",
	stageLogin:       "logging in",
	stageInventory:   "the inventory call (RetrievePropertiesEx)",
	stageLogout:      "logging out the replaced session",
}

// outcome is what a round learned: the vCenter's verdict, and the inventory when it was read.
type outcome struct {
	reason checks.Reason
	msg    string
	inv    *inventory
}

// inventory is what one retrieval read, of the configured datacenter (all when it is empty).
type inventory struct {
	hosts      []host // sorted by name, names unique
	datastores []datastore
}

type host struct {
	name, datacenter string
	state            types.HostSystemConnectionState
	maintenance      bool
}

type datastore struct {
	name, datacenter string
	capacity, free   int64
	accessible       bool
}

// Check makes the round's calls. It returns by ctx's deadline whatever the server does.
func (c *Checker) Check(ctx context.Context) []checks.TargetResult {
	start := time.Now()
	if ctx.Err() != nil {
		r := c.result(start, checks.ReasonTimeout, "check not started: the check's deadline had already passed")
		r.NotContacted, r.NotStarted = true, true
		return c.results(r, nil)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeoutWithoutDeadline)
		defer cancel()
	}
	// Close cuts the calls of a check still running.
	ctx, stop := c.closing.Scope(ctx)
	defer stop()
	stage := new(atomic.Int32)
	done := make(chan outcome, 1) // buffered: an abandoned round must not block on sending
	go func() { done <- c.round(ctx, stage) }()
	o, ok := checks.Await(ctx, done)
	if !ok {
		o = outcome{reason: checks.ReasonTimeout, msg: ""}
	}
	notContacted := false
	if o.reason == checks.ReasonTimeout && o.msg == "" {
		st := stage.Load()
		o.msg = fmt.Sprintf("%s did not finish within %s; the call is abandoned",
			stageNames[st], time.Since(start).Round(time.Millisecond))
		// Cut before any call: the server was not contacted this round.
		notContacted = st == stageWait || st == stageCredentials
	}
	r := c.result(start, o.reason, o.msg)
	r.NotContacted = notContacted
	return c.results(r, o.inv)
}

// results are the round's verdicts: the vCenter's (vc), then one per host. With the inventory
// read, the hosts are those it holds, each with its own state, and the vCenter's verdict carries
// the datastores' samples. Without it, the hosts of the last inventory stand with the vCenter's
// verdict (its reason, and whether the vCenter was contacted): a host is checked through
// vCenter, and its state is unknown. So the hosts' check timestamps move as the vCenter's does,
// and a vCenter outage reads as the provider down, not as checks that stopped.
func (c *Checker) results(vc checks.TargetResult, inv *inventory) []checks.TargetResult {
	if inv == nil {
		c.mu.Lock()
		hosts := slices.Clone(c.hosts)
		c.mu.Unlock()
		rs := make([]checks.TargetResult, 0, 1+len(hosts))
		rs = append(rs, vc)
		for _, h := range hosts {
			r := vc
			r.Target = h
			r.Message = checks.Sanitize("the host's state is unknown: the inventory was not read: " + vc.Message)
			rs = append(rs, r)
		}
		return rs
	}
	for _, d := range inv.datastores {
		vc.Samples = append(vc.Samples, DatastoreSamples(d.datacenter, d.name, d.capacity, d.free, d.accessible)...)
	}
	rs := make([]checks.TargetResult, 0, 1+len(inv.hosts))
	rs = append(rs, vc)
	names := make([]string, 0, len(inv.hosts))
	for _, h := range inv.hosts {
		reason, msg := hostVerdict(h)
		r := vc
		r.Target, r.Reason, r.Up, r.Message, r.Samples = h.name, reason, reason == checks.ReasonReady, msg, nil
		rs = append(rs, r)
		names = append(names, h.name)
	}
	c.mu.Lock()
	c.hosts = names
	c.mu.Unlock()
	return rs
}

// hostVerdict reads a host's state. Maintenance mode comes first: a host deliberately out of
// service is not down, whatever its connection (a host is often disconnected while it is
// serviced).
func hostVerdict(h host) (checks.Reason, string) {
	where := ""
	if h.datacenter != "" {
		where = " (datacenter " + strconv.Quote(h.datacenter) + ")"
	}
	switch {
	case h.maintenance:
		return checks.ReasonMaintenance, fmt.Sprintf("in maintenance mode (runtime.inMaintenanceMode); runtime.connectionState is %s%s", h.state, where)
	case h.state == types.HostSystemConnectionStateConnected:
		return checks.ReasonReady, "connected (runtime.connectionState), not in maintenance mode" + where
	case h.state == types.HostSystemConnectionStateDisconnected:
		return ReasonHostDisconnected, "runtime.connectionState is disconnected: vCenter does not manage the host (disconnected by a user, or its license or agent failed)" + where
	case h.state == types.HostSystemConnectionStateNotResponding:
		return ReasonHostNotResponding, "runtime.connectionState is notResponding: vCenter lost its heartbeat from the host" + where
	}
	return checks.ReasonAPIError, fmt.Sprintf("runtime.connectionState %q is not a known state%s", h.state, where)
}

// round runs in its own goroutine and holds the turn while it makes calls.
func (c *Checker) round(ctx context.Context, stage *atomic.Int32) outcome {
	select {
	case <-c.turn:
	case <-ctx.Done():
		return outcome{reason: checks.ReasonTimeout, msg: ""}
	}
	defer c.release()
	if c.closed.Load() {
		return outcome{reason: checks.ReasonAPIError, msg: "the checker is closed"}
	}
	ctx = withDialDeadline(ctx)

	stage.Store(stageCredentials)
	cr := c.loadCreds()
	if cr.err != nil {
		return outcome{reason: checks.ReasonCredentialsError, msg: cr.err.Error()}
	}
	if c.sess != nil && c.sess.gen != cr.gen {
		stage.Store(stageLogout)
		c.logger.Info("vsphere credentials changed; logging in again", "target", c.target)
		c.logout(ctx, c.sess)
		c.sess = nil
	}
	fresh := false
	for {
		if c.sess == nil {
			s, o, ok := c.login(ctx, stage, cr)
			if !ok {
				return o
			}
			c.sess, fresh = s, true
		}
		stage.Store(stageInventory)
		o, gone := c.inventory(ctx, c.sess)
		if gone && !fresh {
			// The server dropped the session (restart, idle timeout, terminated): log in
			// again with a new cookie jar and ask once more.
			c.logger.Info("vsphere session gone; logging in again", "target", c.target)
			c.sess.soap.CloseIdleConnections()
			c.sess = nil
			continue
		}
		if gone {
			return outcome{reason: checks.ReasonAPIError, msg: "the server refused the session it had just created (NotAuthenticated right after Login)"}
		}
		if ctx.Err() != nil && o.reason != checks.ReasonReady {
			c.sess.soap.CloseIdleConnections() // cancel a dial in progress
		}
		return o
	}
}

// login makes a new client (a new cookie jar) and logs in.
func (c *Checker) login(ctx context.Context, stage *atomic.Int32, cr creds) (*session, outcome, bool) {
	stage.Store(stageConnect)
	sc := soap.NewClient(c.sdk, c.cfg.InsecureSkipTLSVerify)
	t := sc.DefaultTransport()
	t.TLSClientConfig.RootCAs = cr.pool
	t.DialTLSContext = dialTLS(t.TLSClientConfig.Clone())
	// Every answer's body (the inventory's host lists included) is read with a bound; the
	// check's context bounds its time. CloseIdleConnections still reaches t.
	sc.Client.Transport = checks.LimitAnswers(t, checks.MaxAnswerSize)
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		sc.CloseIdleConnections()
		return nil, c.classify(ctx, err, "RetrieveServiceContent"), false
	}
	stage.Store(stageLogin)
	c.logins.Add(1)
	req := types.Login{This: *vc.ServiceContent.SessionManager, UserName: cr.user, Password: cr.pass}
	if _, err := methods.Login(ctx, vc, &req); err != nil {
		sc.CloseIdleConnections()
		if fault.Is(err, &types.InvalidLogin{}) || fault.Is(err, &types.NoPermission{}) {
			return nil, outcome{reason: checks.ReasonUnauthorized, msg: fmt.Sprintf("login of user %s refused: %s", cr.quoteUser(), describe(err))}, false
		}
		return nil, c.classify(ctx, err, "Login"), false
	}
	c.logger.Info("vsphere logged in", "target", c.target, "user", cr.quoteUser())
	return &session{client: vc, soap: sc, gen: cr.gen}, outcome{}, true
}

// inventory makes the round's inventory retrieval. gone says the session is not (or no
// longer) authenticated.
func (c *Checker) inventory(ctx context.Context, s *session) (o outcome, gone bool) {
	r, o, gone := c.retrieve(ctx, s)
	if r == nil {
		return o, gone
	}
	inv := &inventory{hosts: c.hostsOf(r), datastores: c.datastoresOf(r)}
	counts := fmt.Sprintf("%d hosts, %d datastores", len(inv.hosts), len(inv.datastores))
	if c.cfg.Datacenter == "" {
		return outcome{reason: checks.ReasonReady, msg: fmt.Sprintf("logged in; the inventory answered: %d datacenters, %s", len(r.dcName), counts), inv: inv}, false
	}
	if !slices.Contains(slices.Collect(maps.Values(r.dcName)), c.cfg.Datacenter) {
		return outcome{reason: ReasonDatacenterNotFound, msg: fmt.Sprintf("no datacenter named %q among the %d datacenters of the inventory", c.cfg.Datacenter, len(r.dcName)), inv: inv}, false
	}
	return outcome{reason: checks.ReasonReady, msg: fmt.Sprintf("logged in; datacenter %q is in the inventory: %s", c.cfg.Datacenter, counts), inv: inv}, false
}

// retrieved is what the inventory retrieval answered, page by page.
type retrieved struct {
	root     types.ManagedObjectReference
	rootSeen bool
	parent   map[types.ManagedObjectReference]types.ManagedObjectReference
	dcName   map[types.ManagedObjectReference]string
	// hosts and datastores are the HostSystem and Datastore objects.
	hosts, datastores []types.ObjectContent
}

// retrieve reads the inventory, every page of it. On a failure r is nil and o the verdict, or
// gone says the session is not (or no longer) authenticated.
func (c *Checker) retrieve(ctx context.Context, s *session) (r *retrieved, o outcome, gone bool) {
	root := s.client.ServiceContent.RootFolder
	req := types.RetrievePropertiesEx{
		This:    s.client.ServiceContent.PropertyCollector,
		SpecSet: []types.PropertyFilterSpec{inventorySpec(root)},
		Options: types.RetrieveOptions{MaxObjects: pageSize},
	}
	res, err := methods.RetrievePropertiesEx(ctx, s.client, &req)
	if err != nil {
		if fault.Is(err, &types.NotAuthenticated{}) {
			return nil, outcome{}, true
		}
		return nil, c.classify(ctx, err, "RetrievePropertiesEx"), false
	}
	var objects []types.ObjectContent
	token := ""
	if res.Returnval != nil {
		objects, token = res.Returnval.Objects, res.Returnval.Token
	}
	r = &retrieved{
		root:   root,
		parent: map[types.ManagedObjectReference]types.ManagedObjectReference{},
		dcName: map[types.ManagedObjectReference]string{},
	}
	for {
		if o, gone, ok := r.add(objects); !ok {
			return nil, o, gone
		}
		if token == "" || ctx.Err() != nil {
			break
		}
		more, err := methods.ContinueRetrievePropertiesEx(ctx, s.client, &types.ContinueRetrievePropertiesEx{This: req.This, Token: token})
		if err != nil {
			if fault.Is(err, &types.NotAuthenticated{}) {
				return nil, outcome{}, true
			}
			return nil, c.classify(ctx, err, "ContinueRetrievePropertiesEx"), false
		}
		objects, token = more.Returnval.Objects, more.Returnval.Token
	}
	if token != "" {
		return nil, outcome{reason: checks.ReasonTimeout}, false
	}
	if !r.rootSeen {
		return nil, outcome{reason: checks.ReasonAPIError, msg: "RetrievePropertiesEx answered without the root folder"}, false
	}
	return r, outcome{}, false
}

// add adds a page of objects. ok is false when one of them lacks a property: o is then the
// verdict, or gone says the session is no longer authenticated.
func (r *retrieved) add(objects []types.ObjectContent) (o outcome, gone, ok bool) {
	for _, obj := range objects {
		for _, m := range obj.MissingSet {
			if _, ok := m.Fault.Fault.(*types.NotAuthenticated); ok {
				return outcome{}, true, false
			}
			return outcome{reason: checks.ReasonAPIError, msg: fmt.Sprintf("RetrievePropertiesEx: %s %s: %s is missing: %s",
				obj.Obj.Type, obj.Obj.Value, m.Path, faultName(m.Fault.Fault))}, false, false
		}
		if obj.Obj == r.root {
			r.rootSeen = true
		}
		if p, ok := prop(obj, "parent").(types.ManagedObjectReference); ok {
			r.parent[obj.Obj] = p
		}
		switch obj.Obj.Type {
		case "Datacenter":
			r.dcName[obj.Obj], _ = prop(obj, "name").(string)
		case "HostSystem":
			r.hosts = append(r.hosts, obj)
		case "Datastore":
			r.datastores = append(r.datastores, obj)
		}
	}
	return outcome{}, false, true
}

// datacenterOf walks up the parents to the datacenter; "" when the chain does not reach one (an
// object the account cannot see on the way).
func (r *retrieved) datacenterOf(ref types.ManagedObjectReference) string {
	for range 64 {
		if name, ok := r.dcName[ref]; ok {
			return name
		}
		p, ok := r.parent[ref]
		if !ok {
			return ""
		}
		ref = p
	}
	return ""
}

// hostsOf is the hosts retrieved (of the configured datacenter, when one is), by name, each
// name once; the target's own name is no host's.
func (c *Checker) hostsOf(r *retrieved) []host {
	var hosts []host
	seen := map[string]bool{c.target: true}
	for _, obj := range r.hosts {
		h := host{datacenter: r.datacenterOf(obj.Obj)}
		h.name, _ = prop(obj, "name").(string)
		h.state, _ = prop(obj, "runtime.connectionState").(types.HostSystemConnectionState)
		h.maintenance, _ = prop(obj, "runtime.inMaintenanceMode").(bool)
		if h.name == "" || c.cfg.Datacenter != "" && h.datacenter != c.cfg.Datacenter {
			continue
		}
		if seen[h.name] {
			c.logger.Debug("vsphere host name seen twice in the inventory, keeping the first", "target", c.target, "host", h.name)
			continue
		}
		seen[h.name] = true
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, func(a, b host) int { return strings.Compare(a.name, b.name) })
	return hosts
}

// datastoresOf is the datastores retrieved (of the configured datacenter, when one is), by
// datacenter and name.
func (c *Checker) datastoresOf(r *retrieved) []datastore {
	var datastores []datastore
	for _, obj := range r.datastores {
		d := datastore{datacenter: r.datacenterOf(obj.Obj)}
		d.name, _ = prop(obj, "name").(string)
		d.capacity, _ = prop(obj, "summary.capacity").(int64)
		d.free, _ = prop(obj, "summary.freeSpace").(int64)
		d.accessible, _ = prop(obj, "summary.accessible").(bool)
		if d.name == "" || c.cfg.Datacenter != "" && d.datacenter != c.cfg.Datacenter {
			continue
		}
		datastores = append(datastores, d)
	}
	slices.SortFunc(datastores, func(a, b datastore) int {
		return strings.Compare(a.datacenter+"\x00"+a.name, b.datacenter+"\x00"+b.name)
	})
	return datastores
}

// inventorySpec reads, from the root folder down, the folders and datacenters (names and
// parents), the compute resources (parents), the hosts (name, parent, connection state,
// maintenance mode) and the datastores (name, parent, capacity, free space, accessible). The
// parents place each host and datastore in its datacenter. Not the VM or network folders.
func inventorySpec(root types.ManagedObjectReference) types.PropertyFilterSpec {
	traverse := func(name, typ, path string, next ...string) types.BaseSelectionSpec {
		ts := &types.TraversalSpec{SelectionSpec: types.SelectionSpec{Name: name}, Type: typ, Path: path}
		for _, n := range next {
			ts.SelectSet = append(ts.SelectSet, &types.SelectionSpec{Name: n})
		}
		return ts
	}
	return types.PropertyFilterSpec{
		ObjectSet: []types.ObjectSpec{{Obj: root, SelectSet: []types.BaseSelectionSpec{
			traverse("folder", "Folder", "childEntity", "folder", "hostFolder", "datastoreFolder", "hosts"),
			traverse("hostFolder", "Datacenter", "hostFolder", "folder"),
			traverse("datastoreFolder", "Datacenter", "datastoreFolder", "folder"),
			traverse("hosts", "ComputeResource", "host"),
		}}},
		PropSet: []types.PropertySpec{
			{Type: "Folder", PathSet: []string{"name", "parent"}},
			{Type: "Datacenter", PathSet: []string{"name", "parent"}},
			{Type: "ComputeResource", PathSet: []string{"parent"}},
			{Type: "HostSystem", PathSet: []string{"name", "parent", "runtime.connectionState", "runtime.inMaintenanceMode"}},
			{Type: "Datastore", PathSet: []string{"name", "parent", "summary.capacity", "summary.freeSpace", "summary.accessible"}},
		},
	}
}

// prop is the value of obj's property name, nil when it was not returned.
func prop(obj types.ObjectContent, name string) any {
	for _, p := range obj.PropSet {
		if p.Name == name {
			return p.Val
		}
	}
	return nil
}

// classify maps a failed call to a reason and a message naming the call.
func (c *Checker) classify(ctx context.Context, err error, call string) outcome {
	// The TLS dial carries the round's deadline on a timer of its own, which may fire a moment
	// before ctx's: a cut at or after the deadline is the deadline's.
	dl, hasDeadline := ctx.Deadline()
	if cutByDeadline(err) && (ctx.Err() != nil || hasDeadline && !time.Now().Before(dl)) {
		return outcome{reason: checks.ReasonTimeout, msg: ""}
	}
	if checks.IsAnswerTooLarge(err) {
		return outcome{reason: checks.ReasonAPIError, msg: call + ": " + checks.ErrAnswerTooLarge.Error()}
	}
	var (
		unknownCA   x509.UnknownAuthorityError
		hostnameErr x509.HostnameError
		invalidErr  x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &verifyErr) && errors.As(verifyErr.Err, &unknownCA):
		what := "the system roots"
		if c.cfg.CAFile != "" {
			what = "caFile " + c.cfg.CAFile
		}
		return outcome{reason: ReasonTLSError, msg: fmt.Sprintf("%s: the server's certificate is not signed by %s: %s", call, what, checks.ErrorDetail(err))}
	case errors.As(err, &hostnameErr):
		return outcome{reason: ReasonTLSError, msg: fmt.Sprintf("%s: the server's certificate is not for %s: %s", call, c.sdk.Hostname(), checks.ErrorDetail(err))}
	case errors.As(err, &invalidErr), errors.As(err, &verifyErr):
		return outcome{reason: ReasonTLSError, msg: fmt.Sprintf("%s: the server's certificate is not valid: %s", call, checks.ErrorDetail(err))}
	case errors.As(err, &recordErr):
		return outcome{reason: ReasonTLSError, msg: fmt.Sprintf("%s: the server does not speak TLS: %s", call, checks.ErrorDetail(err))}
	case errors.As(err, &alertErr):
		return outcome{reason: ReasonTLSError, msg: fmt.Sprintf("%s: the server refused the TLS handshake: %s", call, checks.ErrorDetail(err))}
	case soap.IsSoapFault(err) || soap.IsVimFault(err):
		return outcome{reason: checks.ReasonAPIError, msg: fmt.Sprintf("%s: the server answered a fault: %s", call, describe(err))}
	}
	if unreachable(err) {
		return outcome{reason: checks.ReasonAPIUnreachable, msg: fmt.Sprintf("%s: %s unreachable: %s", call, c.sdk.Host, checks.ErrorDetail(err))}
	}
	return outcome{reason: checks.ReasonAPIError, msg: fmt.Sprintf("%s failed: %s", call, checks.ErrorDetail(err))}
}

// unreachable reports a failure to get any answer: name resolution, connect, a connection
// closed or reset before an answer, a connect that timed out before the round's deadline.
func unreachable(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || errors.As(err, &opErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// cutByDeadline reports errors of a call cut short by its context or a timeout.
func cutByDeadline(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// describe names a fault by its type and the server's text: "InvalidLogin: Login failure".
func describe(err error) string {
	switch {
	case soap.IsSoapFault(err):
		f := soap.ToSoapFault(err)
		name := faultName(f.VimFault())
		if f.String != "" && f.String != name {
			return name + ": " + f.String
		}
		return name
	case soap.IsVimFault(err):
		return faultName(soap.ToVimFault(err))
	}
	return checks.ErrorDetail(err)
}

func faultName(f any) string {
	if f == nil {
		return "fault"
	}
	t := reflect.TypeOf(f)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// quoteUser names the user in a message or a log line (a username is not a secret), shortened;
// a username that holds the password or another secret (usernameFile pointed at a secret file)
// is redacted before it is shortened, so no part of the secret shows.
func (cr creds) quoteUser() string {
	if cr.user == cr.pass {
		return strconv.Quote(checks.Redacted)
	}
	return strconv.Quote(checks.Clip(checks.Redact(cr.user), 64))
}

// dialDeadlineKey carries the round's deadline to the TLS dial: net/http dials with a context
// detached from the request's cancellation (and deadline), keeping only its values.
type dialDeadlineKey struct{}

func withDialDeadline(ctx context.Context) context.Context {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithValue(ctx, dialDeadlineKey{}, dl)
	}
	return ctx
}

// dialTLS replaces govmomi's TLS dial (tls.Dial, without context or timeout): the TCP connect
// and the handshake end at the round's deadline, or after dialTimeout.
func dialTLS(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dl := time.Now().Add(dialTimeout)
		if d, ok := ctx.Value(dialDeadlineKey{}).(time.Time); ok && d.Before(dl) {
			dl = d
		}
		ctx, cancel := context.WithDeadline(ctx, dl)
		defer cancel()
		d := &tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 30 * time.Second}, Config: cfg}
		return d.DialContext(ctx, network, addr)
	}
}

// loadCreds reads the files again when any changed since the last read.
func (c *Checker) loadCreds() creds {
	cr := &c.creds
	if cr.read && !cr.userAt.Changed(c.cfg.UsernameFile) && !cr.passAt.Changed(c.cfg.PasswordFile) &&
		(c.cfg.CAFile == "" || !cr.caAt.Changed(c.cfg.CAFile)) {
		return *cr
	}
	next := creds{read: true, gen: cr.gen}
	var err error
	next.userAt, _ = checks.StatFile(c.cfg.UsernameFile)
	next.passAt, _ = checks.StatFile(c.cfg.PasswordFile)
	if next.userRaw, next.user, err = readSecret(c.cfg.UsernameFile, "usernameFile"); err != nil {
		next.err = err
	} else if next.passRaw, next.pass, err = readSecret(c.cfg.PasswordFile, "passwordFile"); err != nil {
		next.err = err
	} else if c.cfg.CAFile != "" {
		next.caAt, _ = checks.StatFile(c.cfg.CAFile)
		b, err := fileread.Read(c.cfg.CAFile, fileread.CredentialLimit)
		switch {
		case err != nil:
			next.err = fmt.Errorf("caFile: %w", err)
		default:
			next.caRaw = string(b)
			next.pool = x509.NewCertPool()
			if !next.pool.AppendCertsFromPEM(b) {
				next.err = fmt.Errorf("caFile %s holds no PEM certificate", c.cfg.CAFile)
			}
		}
	}
	if next.err == nil && (cr.gen == 0 || next.userRaw != cr.userRaw || next.passRaw != cr.passRaw || next.caRaw != cr.caRaw) {
		next.gen++
	}
	if next.err != nil {
		// Read again at the next check, whatever the files' state.
		next.read = false
		next.gen = cr.gen
		next.userRaw, next.passRaw, next.caRaw = cr.userRaw, cr.passRaw, cr.caRaw
	}
	*cr = next
	return next
}

// readSecret reads a one-line credentials file; the error names the file, never its content.
func readSecret(path, field string) (raw, value string, err error) {
	b, err := fileread.Read(path, fileread.CredentialLimit)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", field, err)
	}
	raw = string(b)
	value = strings.TrimSuffix(strings.TrimSuffix(raw, "\n"), "\r")
	if value == "" {
		return "", "", fmt.Errorf("%s %s is empty", field, path)
	}
	return raw, value, nil
}

func (c *Checker) result(start time.Time, reason checks.Reason, msg string) checks.TargetResult {
	now := time.Now()
	// No secret, no control character, a bounded length, before it is logged.
	msg = checks.Sanitize(msg)
	r := checks.TargetResult{
		Target: c.target, Up: reason == checks.ReasonReady, Reason: reason, Message: msg,
		Duration: now.Sub(start), CheckedAt: now,
	}
	c.logger.Debug("vsphere check done", "target", c.target, "reason", string(reason), "message", msg, "duration", r.Duration)
	return r
}

// ProbeTarget checks a target now, on demand: the same calls as a round's check, on the same
// session, whose verdict on target it returns (a host's too: it is read by the same retrieval).
func (c *Checker) ProbeTarget(ctx context.Context, target string, trace *checks.Trace) (checks.TargetResult, error) {
	if !slices.Contains(c.Targets(), target) {
		return checks.TargetResult{}, checks.ErrUnknownTarget
	}
	end := trace.Begin("vSphere RetrievePropertiesEx on " + c.target)
	for _, r := range c.Check(ctx) {
		if r.Target != target {
			continue
		}
		if r.Up {
			end("ok: " + r.Message)
		} else {
			end(string(r.Reason) + ": " + r.Message)
		}
		return r, nil
	}
	end("no verdict: the host is no longer in the inventory")
	return checks.TargetResult{}, fmt.Errorf("%w: %s is no longer in the inventory", checks.ErrUnknownTarget, target)
}
