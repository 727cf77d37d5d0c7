// Package config loads and validates the providers file (--config.file): which infrastructure
// providers the exporter checks and how to reach them. Validation is strict and complete: every
// problem of a file is reported at once, each placed at its file, line and column and naming the
// field and what is allowed. The loader fills in every default, so the Config it returns is the
// one the checks use as is. Secrets are referenced by path only; the loader never opens them.
package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// The keys each mapping allows, in the order the docs list them: the yaml names of the fields
// of the type it decodes into, in declaration order.
var (
	rootFields       = yamlKeys[Config]()
	providerFields   = yamlKeys[Provider]()
	kubernetesFields = yamlKeys[KubernetesConfig]()
	gcpFields        = yamlKeys[GCPConfig]()
	kvmFields        = yamlKeys[KVMConfig]()
	hostFields       = yamlKeys[KVMHost]()
)

// yamlKeys returns the keys of T's yaml struct tags, in field order.
func yamlKeys[T any]() []string {
	t := reflect.TypeFor[T]()
	keys := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

// typeNames are the provider types (checks.Types) as the file spells them.
var typeNames = func() []string {
	var names []string
	for _, t := range checks.Types {
		names = append(names, string(t))
	}
	return names
}()

// Load reads and validates the providers file at path. A file that does not validate returns
// Errors; a file that cannot be read returns the read error.
func Load(path string) (*Config, error) { return LoadFor(path, 0) }

// LoadFor is Load for an exporter whose rounds have the deadline roundTimeout: a kvm provider
// whose bounds add up to more than it (KVMConfig.HostBound) is an error too. 0 skips that check
// (checks off).
func LoadFor(path string, roundTimeout time.Duration) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading providers file: %w", err)
	}
	return ParseFor(path, data, roundTimeout)
}

// Parse validates data as the providers file named filename (used in error messages; relative
// paths in the file are taken from filename's directory). On failure the error is Errors, every
// problem of the file sorted by position.
func Parse(filename string, data []byte) (*Config, error) { return ParseFor(filename, data, 0) }

// ParseFor is Parse with the round deadline of LoadFor.
func ParseFor(filename string, data []byte, roundTimeout time.Duration) (*Config, error) {
	base, err := filepath.Abs(filepath.Dir(filename))
	if err != nil {
		// Only when the working directory is gone; the paths stay relative to it.
		base = filepath.Dir(filename)
	}
	d := &decoder{file: filename, baseDir: base, roundTimeout: roundTimeout}
	cfg := d.parse(data)
	if len(d.errs) > 0 {
		sortErrors(d.errs)
		return nil, d.errs
	}
	return cfg, nil
}

func (d *decoder) parse(data []byte) (cfg *Config) {
	root := d.document(data)
	if root == nil {
		return nil
	}
	d.budget = 2*countNodes(root) + aliasBudget
	defer func() {
		if r := recover(); r != nil {
			if r != errBudget {
				panic(r)
			}
			d.add(root, "", "%v", errBudget)
			cfg = nil
		}
	}()
	return d.config(root)
}

func (d *decoder) config(root *yaml.Node) *Config {
	if r := d.resolve(root); r == nil || r.Kind != yaml.MappingNode {
		d.add(r, "", "the providers file must be a mapping with a providers key, got %s", describe(r))
		return nil
	}
	m, _ := d.mapping(root, nil, "", rootFields, false)
	cfg := &Config{Providers: []Provider{}}
	e, present := m.fields["providers"]
	if !present {
		d.add(m.where, "providers", "missing required field (a list of providers; providers: [] for none)")
		return nil
	}
	items, ok := d.sequence(e.value, "providers")
	if !ok {
		return nil
	}
	names := map[string]nameUse{}
	for i, item := range items {
		if p, ok := d.provider(item, index("providers", i), i, names); ok {
			cfg.Providers = append(cfg.Providers, p)
		}
	}
	return cfg
}

// nameUse remembers where a provider name was first used.
type nameUse struct {
	index, line int
}

func (d *decoder) provider(n *yaml.Node, path string, i int, names map[string]nameUse) (Provider, bool) {
	var p Provider
	m, ok := d.mapping(n, nil, path, providerFields, false)
	if !ok {
		return p, false
	}
	name, nv, nameOK := d.required(m, "name", "")
	first, dup := names[name]
	switch {
	case !nameOK:
		ok = false
	case dnsLabel(name) != "":
		d.add(nv, join(path, "name"), "invalid name %s: %s", quote(name), dnsLabel(name))
		ok = false
	case dup:
		d.add(nv, join(path, "name"), "duplicate provider name %s (first used by providers[%d] at line %d)",
			quote(name), first.index, first.line)
		ok = false
	default:
		names[name] = nameUse{index: i, line: nv.Line}
	}
	allowed := " (allowed: " + strings.Join(typeNames, ", ") + ")"
	typ, tv, typeOK := d.required(m, "type", allowed)
	if typeOK && !slices.Contains(typeNames, typ) {
		d.add(tv, join(path, "type"), "unknown provider type %s%s", quote(typ), allowed)
		typeOK = false
	}
	p = Provider{Name: name, Type: checks.ProviderType(typ)}
	if !typeOK {
		return p, false
	}
	for _, t := range typeNames {
		if e, has := m.fields[t]; has && t != typ {
			d.add(e.key, join(path, t), "block does not match type %s (a %s provider takes a %s block)",
				quote(typ), typ, typ)
			ok = false
		}
	}
	e, has := m.fields[typ]
	if !has {
		d.add(m.where, join(path, typ), "missing required field (a %s provider needs a %s block)", typ, typ)
		return p, false
	}
	blockPath := join(path, typ)
	var blockOK bool
	switch checks.ProviderType(typ) {
	case checks.TypeKubernetes:
		p.Kubernetes, blockOK = d.kubernetes(e, blockPath)
	case checks.TypeGCP:
		p.GCP, blockOK = d.gcp(e, blockPath)
	case checks.TypeKVM:
		p.KVM, blockOK = d.kvm(e, blockPath)
	}
	return p, ok && blockOK
}

// record notes a problem found by a check and reports whether there was none.
func (d *decoder) record(v *yaml.Node, field, problem string) bool {
	if problem == "" {
		return true
	}
	d.add(v, field, "%s", problem)
	return false
}

func (d *decoder) kubernetes(e entry, path string) (*KubernetesConfig, bool) {
	m, ok := d.mapping(e.value, e.key, path, kubernetesFields, true)
	if !ok {
		return nil, false
	}
	k := &KubernetesConfig{}
	errs := len(d.errs)
	k.Kubeconfig = d.filePath(m, "kubeconfig", false, "")
	k.Context, _, _ = d.str(m, "context")

	group, gv, _ := d.str(m, "group")
	version, vv, _ := d.str(m, "version")
	resource, rv, _ := d.str(m, "resource")
	if group != "" {
		if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
			d.add(gv, join(path, "group"), "invalid API group %s: %s", quote(group), strings.Join(msgs, "; "))
		}
	}
	if version != "" {
		if msgs := validation.IsDNS1035Label(version); len(msgs) > 0 {
			d.add(vv, join(path, "version"), "invalid API version %s: %s", quote(version), strings.Join(msgs, "; "))
		}
	}
	if resource != "" {
		d.record(rv, join(path, "resource"), labelProblem("resource", resource))
	} else if group != "" || version != "" {
		if rv == nil {
			d.add(m.where, join(path, "resource"), "missing required field (required when group or version is set)")
		} else {
			d.add(rv, join(path, "resource"), "must not be empty when group or version is set")
		}
	}
	k.Group = group
	k.Version = cmpOr(version, DefaultKubernetesVersion)
	k.Resource = cmpOr(resource, DefaultKubernetesResource)

	namespace, nsv, _ := d.str(m, "namespace")
	if namespace != "" {
		d.record(nsv, join(path, "namespace"), labelProblem("namespace", namespace))
	}
	k.Namespace = namespace

	selector, sv, selOK := d.str(m, "labelSelector")
	switch {
	case !selOK:
	case sv == nil:
		k.LabelSelector = DefaultLabelSelector
	default:
		if _, err := labels.Parse(selector); err != nil {
			d.add(sv, join(path, "labelSelector"), "invalid label selector %s: %v", quote(selector), err)
		}
		k.LabelSelector = selector
	}
	return k, len(d.errs) == errs
}

// gcpProjectID is the format of a GCP project ID.
var gcpProjectID = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

func (d *decoder) gcp(e entry, path string) (*GCPConfig, bool) {
	m, ok := d.mapping(e.value, e.key, path, gcpFields, true)
	if !ok {
		return nil, false
	}
	g := &GCPConfig{}
	errs := len(d.errs)
	if project, pv, ok := d.required(m, "project", ""); ok {
		if !gcpProjectID.MatchString(project) {
			d.add(pv, join(path, "project"), "invalid project ID %s: must be 6 to 30 characters of a-z, 0-9 and '-', "+
				"starting with a letter and ending with a letter or digit", quote(project))
		}
		g.Project = project
	}
	g.CredentialsFile = d.filePath(m, "credentialsFile", false, "")
	filter, fv, filterOK := d.str(m, "filter")
	if filterOK && fv == nil {
		filter = DefaultGCPFilter
	}
	g.Filter = filter
	if endpoint, ev, ok := d.str(m, "endpoint"); ok && endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.add(ev, join(path, "endpoint"), "invalid endpoint %s: must be an absolute http or https URL", quote(endpoint))
		}
		g.Endpoint = endpoint
	}
	return g, len(d.errs) == errs
}

func (d *decoder) kvm(e entry, path string) (*KVMConfig, bool) {
	m, ok := d.mapping(e.value, e.key, path, kvmFields, true)
	if !ok {
		return nil, false
	}
	k := &KVMConfig{}
	errs := len(d.errs)
	k.User, _, _ = d.required(m, "user", "")
	k.PrivateKeyFile = d.filePath(m, "privateKeyFile", true, "")
	k.PassphraseFile = d.filePath(m, "passphraseFile", false, "")
	k.InsecureSkipHostKeyVerification, _ = d.boolean(m, "insecureSkipHostKeyVerification")
	k.KnownHostsFile = d.filePath(m, "knownHostsFile", !k.InsecureSkipHostKeyVerification,
		" (required unless insecureSkipHostKeyVerification: true)")

	k.Port = DefaultKVMPort
	if port, pv, set, ok := d.integer(m, "port"); ok && set {
		if port < 1 || port > 65535 {
			d.add(pv, join(path, "port"), "port %d is out of range (allowed: 1-65535)", port)
		}
		k.Port = port
	}
	k.Socket = DefaultLibvirtSocket
	if socket, sv, ok := d.str(m, "socket"); ok && socket != "" {
		// The socket is a path on the remote host: it is never resolved locally.
		if !strings.HasPrefix(socket, "/") || strings.ContainsRune(socket, 0) {
			d.add(sv, join(path, "socket"), "invalid socket %s: must be an absolute path on the host", quote(socket))
		}
		k.Socket = socket
	}
	k.StoragePool, _, _ = d.required(m, "storagePool", "")
	k.Concurrency = 0 // derived from the host count below unless set
	if c, cv, set, ok := d.integer(m, "concurrency"); ok && set {
		if c < 1 || c > MaxKVMConcurrency {
			d.add(cv, join(path, "concurrency"), "concurrency %d is out of range (allowed: 1-%d)", c, MaxKVMConcurrency)
		}
		k.Concurrency = c
	}
	k.TCPTimeout = d.dialBound(m, "tcpTimeout", DefaultKVMTCPTimeout)
	k.SSHTimeout = d.dialBound(m, "sshTimeout", DefaultKVMSSHTimeout)
	k.LibvirtTimeout = d.dialBound(m, "libvirtTimeout", DefaultKVMLibvirtTimeout)
	k.RPCTimeout = d.dialBound(m, "rpcTimeout", DefaultKVMRPCTimeout)
	if d.roundTimeout > 0 && len(d.errs) == errs && k.HostBound() > d.roundTimeout {
		d.add(e.key, path, "a host's bounds add up to more than a round's deadline of %v (--provider-check-timeout): %s; "+
			"a host that runs them out would hold its concurrency slot past the round. Lower the bounds or raise the timeout",
			d.roundTimeout, k.HostBoundArithmetic())
	}
	k.Hosts = d.hosts(m, path, k.Port)
	if k.Concurrency == 0 {
		k.Concurrency = DefaultKVMConcurrencyFor(len(k.Hosts))
	}
	return k, len(d.errs) == errs
}

// dialBound reads the bound of one kvm dial stage: a Go duration within the allowed range;
// absent or null is def.
func (d *decoder) dialBound(m *mapping, name string, def time.Duration) time.Duration {
	s, v, ok := d.str(m, name)
	if !ok || s == "" {
		return def
	}
	b, err := time.ParseDuration(s)
	if err != nil {
		d.add(v, join(m.path, name), "invalid duration %s (a Go duration such as 2s or 500ms)", quote(s))
		return def
	}
	if b < MinKVMDialBound || b > MaxKVMDialBound {
		d.add(v, join(m.path, name), "%s is out of range (allowed: %v-%v)", s, MinKVMDialBound, MaxKVMDialBound)
	}
	return b
}

// hostUse remembers where a host name or address was first used.
type hostUse struct {
	index, line int
}

func (d *decoder) hosts(m *mapping, path string, defaultPort int) []KVMHost {
	hostsPath := join(path, "hosts")
	e, present := m.fields["hosts"]
	if !present {
		d.add(m.where, hostsPath, "missing required field (a list of at least one host)")
		return nil
	}
	items, ok := d.sequence(e.value, hostsPath)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.add(e.key, hostsPath, "must list at least one host")
		return nil
	}
	var hosts []KVMHost
	names := map[string]hostUse{}
	addrs := map[string]hostUse{}
	for i, item := range items {
		hp := index(hostsPath, i)
		hm, ok := d.mapping(item, nil, hp, hostFields, false)
		if !ok {
			continue
		}
		addr, av, ok := d.required(hm, "address", " (host, host:port or [v6]:port)")
		if !ok {
			continue
		}
		host, port, hasPort, problem := splitAddress(addr)
		if !d.record(av, join(hp, "address"), problem) {
			continue
		}
		if !hasPort {
			port = defaultPort
		}
		dupAddr := false
		key := net.JoinHostPort(strings.ToLower(host), strconv.Itoa(port))
		if first, dup := addrs[key]; dup {
			d.add(av, join(hp, "address"), "duplicate address %s (first used by hosts[%d] at line %d)",
				quote(addr), first.index, first.line)
			dupAddr = true
		} else {
			addrs[key] = hostUse{index: i, line: av.Line}
		}
		name, nv, _ := d.str(hm, "name")
		if name == "" {
			name, nv = addr, av
		} else if strings.IndexFunc(name, unicode.IsControl) >= 0 {
			d.add(nv, join(hp, "name"), "invalid name %s: must not contain control characters", quote(name))
		}
		if first, dup := names[name]; dup {
			// The same address twice is already reported; its defaulted name would only repeat it.
			if !dupAddr {
				d.add(nv, join(hp, "name"), "duplicate target name %s (first used by hosts[%d] at line %d)",
					quote(name), first.index, first.line)
			}
		} else {
			names[name] = hostUse{index: i, line: nv.Line}
		}
		hosts = append(hosts, KVMHost{Address: addr, Name: name})
	}
	return hosts
}

// splitAddress parses host, host:port, [v6] or [v6]:port. problem is empty when the address
// is valid.
func splitAddress(addr string) (host string, port int, hasPort bool, problem string) {
	const allowed = " (allowed: host, host:port or [v6]:port)"
	bad := func(why string) (string, int, bool, string) {
		return "", 0, false, "invalid address " + quote(addr) + ": " + why + allowed
	}
	var portText string
	switch {
	case strings.HasPrefix(addr, "["):
		end := strings.IndexByte(addr, ']')
		if end < 0 {
			return bad("missing ']'")
		}
		host = addr[1:end]
		rest := addr[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad("unexpected text after ']'")
			}
			hasPort, portText = true, rest[1:]
		}
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return bad("not an IPv6 address in brackets")
		}
	case strings.Count(addr, ":") > 1:
		// Without brackets fd00::1:22 could be a port or the last group of the address.
		return bad("an IPv6 address goes in brackets, [v6] or [v6]:port")
	case strings.Contains(addr, ":"):
		i := strings.IndexByte(addr, ':')
		host, hasPort, portText = addr[:i], true, addr[i+1:]
		if p := hostProblem(host); p != "" {
			return bad(p)
		}
	default:
		host = addr
		if p := hostProblem(host); p != "" {
			return bad(p)
		}
	}
	if hasPort {
		n, err := strconv.Atoi(portText)
		if err != nil || strings.ContainsAny(portText, "+-") || n < 1 || n > 65535 {
			return bad("port " + quote(portText) + " is not a number from 1 to 65535")
		}
		port = n
	}
	return host, port, hasPort, ""
}

// hostProblem checks a host name or IPv4 address.
func hostProblem(host string) string {
	if host == "" {
		return "empty host"
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if len(host) > 253 {
		return "host name longer than 253 characters"
	}
	allDigits := true
	for label := range strings.SplitSeq(host, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "not a valid host name or IP address"
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return "not a valid host name or IP address"
			}
			if c < '0' || c > '9' {
				allDigits = false
			}
		}
	}
	if allDigits {
		return "not a valid IPv4 address"
	}
	return ""
}

// dnsLabel checks a DNS-1123 label; the result is empty when s is one.
func dnsLabel(s string) string {
	const rule = "must be a DNS-1123 label: 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return rule
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return rule
		}
	}
	return ""
}

// labelProblem is dnsLabel's verdict as a message about a named value.
func labelProblem(what, s string) string {
	if p := dnsLabel(s); p != "" {
		return "invalid " + what + " " + quote(s) + ": " + p
	}
	return ""
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Warnings lists what the exporter should say loudly at every load: settings that weaken
// security and configurations that check nothing.
func (c *Config) Warnings() []string {
	var ws []string
	if len(c.Providers) == 0 {
		ws = append(ws, "no providers configured: the exporter runs no checks")
	}
	for _, p := range c.Providers {
		if p.KVM == nil || !p.KVM.InsecureSkipHostKeyVerification {
			continue
		}
		w := fmt.Sprintf("provider %q: SSH host key verification is off (insecureSkipHostKeyVerification: true): "+
			"any machine answering at a host's address is trusted", p.Name)
		if p.KVM.KnownHostsFile != "" {
			w += "; knownHostsFile is ignored"
		}
		ws = append(ws, w)
	}
	return ws
}

// Equal reports whether p and q are the same entry in every field, blocks included. A reload
// keeps the checker (and its connections and state) of a provider whose entry is Equal.
func (p Provider) Equal(q Provider) bool {
	if p.Name != q.Name || p.Type != q.Type {
		return false
	}
	if (p.Kubernetes == nil) != (q.Kubernetes == nil) || p.Kubernetes != nil && *p.Kubernetes != *q.Kubernetes {
		return false
	}
	if (p.GCP == nil) != (q.GCP == nil) || p.GCP != nil && *p.GCP != *q.GCP {
		return false
	}
	if (p.KVM == nil) != (q.KVM == nil) {
		return false
	}
	if p.KVM == nil {
		return true
	}
	a, b := *p.KVM, *q.KVM
	if !slices.Equal(a.Hosts, b.Hosts) {
		return false
	}
	a.Hosts, b.Hosts = nil, nil
	return reflect.DeepEqual(a, b)
}

// DialAddress is the host's host:port to dial: its address, with defaultPort (the provider's
// port) when the address carries none.
func (h KVMHost) DialAddress(defaultPort int) string {
	host, port, hasPort, problem := splitAddress(h.Address)
	if problem != "" {
		// Not a loaded address; dialling it as written gives the dialer's own error.
		return h.Address
	}
	if !hasPort {
		port = defaultPort
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
