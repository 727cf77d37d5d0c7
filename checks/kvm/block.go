package kvm

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
)

func init() {
	checks.Register(checks.Type{
		Name:    Type,
		Reasons: reasons,
		Block:   config.BlockType{Fields: config.YAMLKeys[Config](), Decode: decode},
		New:     New,
		Gauges:  []*checks.Gauge{poolCapacity, poolAllocation, poolAvailable},
		// Each host is its own SSH link: sharded replicas split the hosts.
		PerTarget: true,
	})
}

// reasons is the type's catalogue; reasons.md beside this file (the type's section of
// docs/reasons.md) explains each and says what to do.
var reasons = []checks.ReasonInfo{
	{Reason: checks.ReasonReady, Meaning: "The host answered over the pooled SSH + libvirt connection (library version and hostname) and its storage pool is running."},
	{Reason: checks.ReasonTimeout, Meaning: "No verdict that blames a stage."},
	{Reason: ReasonKeyMaterialError, Meaning: "The SSH private key (or its passphrase file) is missing, unreadable, encrypted without a passphrase, or invalid; or the known_hosts file is missing or unreadable."},
	{Reason: ReasonTCPUnreachable, Meaning: "The TCP connection to the host's SSH port failed (refused, no route, DNS) or got no answer within `tcpTimeout` (packets silently dropped)."},
	{Reason: ReasonSSHHandshakeFailed, Meaning: "TCP connected but the SSH protocol handshake, up to the host key's acceptance, failed."},
	{Reason: ReasonSSHAuthFailed, Meaning: "Anything that fails once the host key was accepted."},
	{Reason: ReasonHostKeyUnknown, Meaning: "The known_hosts file has no entry for the host."},
	{Reason: ReasonHostKeyMismatch, Meaning: "The host presented a key that differs from the known_hosts entry, or offers none of the key types known_hosts holds for it."},
	{Reason: ReasonLibvirtSocketUnreachable, Meaning: "SSH works but sshd could not open the libvirt socket."},
	{Reason: ReasonLibvirtConnectFailed, Meaning: "The channel to the socket opened but libvirtd answered libvirt's connection handshake with an error or closed the connection."},
	{Reason: ReasonLibvirtError, Meaning: "libvirtd answered an RPC with an error (other than a missing pool)."},
	{Reason: ReasonPoolNotFound, Meaning: "The configured storage pool is not defined on the host."},
	{Reason: ReasonPoolInactive, Meaning: "The pool exists but is not running."},
	{Reason: ReasonPoolBuilding, Meaning: "The pool is being built."},
	{Reason: ReasonPoolDegraded, Meaning: "The pool is running degraded (e.g. a missing device under it)."},
	{Reason: ReasonPoolInaccessible, Meaning: "The pool is running but its storage is not accessible."},
}

// The type's own gauges: the storage pool's sizes, as the last check read them. A pool that
// is not running has no series (libvirt reports zero sizes for it).
var (
	poolCapacity = &checks.Gauge{Name: checks.MetricNamespace + "_kvm_storage_pool_capacity_bytes",
		Help: "Capacity of the KVM host's storage pool, as read by the last check.", Labels: []string{"pool"}}
	poolAllocation = &checks.Gauge{Name: checks.MetricNamespace + "_kvm_storage_pool_allocation_bytes",
		Help: "Bytes allocated in the KVM host's storage pool, as read by the last check.", Labels: []string{"pool"}}
	poolAvailable = &checks.Gauge{Name: checks.MetricNamespace + "_kvm_storage_pool_available_bytes",
		Help: "Bytes available in the KVM host's storage pool, as read by the last check.", Labels: []string{"pool"}}
)

// The block's defaults and bounds, applied and checked by the loader.
const (
	// DefaultPort is the SSH port of a host whose address carries none.
	DefaultPort = 22
	// DefaultSocket is the libvirt socket path on a host.
	DefaultSocket = "/var/run/libvirt/libvirt-sock"
	// DefaultConcurrency is how many hosts of one provider are checked at once, at least: see
	// DefaultConcurrencyFor.
	DefaultConcurrency = 32
	// hostsPerSlot is how many hosts one concurrency slot is given by default in a large
	// provider (DefaultConcurrencyFor).
	hostsPerSlot = 20
	// MaxConcurrency bounds concurrency: more SSH sessions at once than this only queues
	// inside the exporter.
	MaxConcurrency = 1024
)

// The bounds of a check (tcpTimeout, sshTimeout, libvirtTimeout, rpcTimeout) when the block
// sets none, and the range a block may set. The defaults add up to 10s per host (see
// Config.HostBound), so that they fit the shortest round the flags derive by default
// (min(15s, interval) with an interval of at least 10s).
const (
	DefaultTCPTimeout     = 2 * time.Second
	DefaultSSHTimeout     = 2 * time.Second
	DefaultLibvirtTimeout = time.Second
	DefaultRPCTimeout     = 500 * time.Millisecond
	MinDialBound          = 10 * time.Millisecond
	MaxDialBound          = time.Minute
)

// CallsPerCheck is how many libvirt calls one check of a host makes at most (its first on a
// new link), each bounded by rpcTimeout.
const CallsPerCheck = 4

// Config is the block of a `type: kvm` provider.
type Config struct {
	// User is the SSH user on every host.
	User string `yaml:"user"`
	// PrivateKeyFile is the SSH private key path (absolute after loading).
	PrivateKeyFile string `yaml:"privateKeyFile"`
	// PassphraseFile holds the private key's passphrase; empty means the key is not encrypted.
	PassphraseFile string `yaml:"passphraseFile,omitempty"`
	// KnownHostsFile is required unless InsecureSkipHostKeyVerification is set.
	KnownHostsFile string `yaml:"knownHostsFile,omitempty"`
	// InsecureSkipHostKeyVerification is an explicit opt-out, logged as a warning at every load.
	InsecureSkipHostKeyVerification bool `yaml:"insecureSkipHostKeyVerification,omitempty"`
	// Port is the SSH port (default 22); a host's address may carry its own.
	Port int `yaml:"port,omitempty"`
	// Socket is the libvirt socket path on the host (default /var/run/libvirt/libvirt-sock).
	Socket string `yaml:"socket,omitempty"`
	// StoragePool is the libvirt storage pool whose state and sizes each host reports.
	StoragePool string `yaml:"storagePool"`
	// Concurrency bounds how many hosts of this provider are checked at once (default:
	// DefaultConcurrencyFor the host count).
	Concurrency int `yaml:"concurrency,omitempty"`
	// TCPTimeout, SSHTimeout and LibvirtTimeout bound the stages of a dial to a host: the TCP
	// connect; the SSH handshake with host key verification, and again authentication; opening
	// the libvirt socket, and again libvirt's connect. RPCTimeout bounds each libvirt call of a
	// check. Defaults 2s, 2s, 1s, 500ms.
	TCPTimeout     time.Duration `yaml:"tcpTimeout,omitempty"`
	SSHTimeout     time.Duration `yaml:"sshTimeout,omitempty"`
	LibvirtTimeout time.Duration `yaml:"libvirtTimeout,omitempty"`
	RPCTimeout     time.Duration `yaml:"rpcTimeout,omitempty"`
	// Hosts are the provider's targets listed in the providers file: at least one, unless
	// HostFiles is set. In the block a checker is built from, the hosts of the files follow.
	Hosts []Host `yaml:"hosts,omitempty"`
	// HostFiles are globs (absolute after loading) of files in Prometheus's file_sd format
	// whose targets are hosts too, each named by its address and labelled by its group's
	// labels (config.Inventory): read at every load and again when one changes.
	HostFiles []string `yaml:"hostFiles,omitempty"`

	// ConcurrencyDerived says Concurrency was derived from the host count (the block sets
	// none), so that WithTargets derives it again for the hosts of the files.
	ConcurrencyDerived bool `yaml:"-"`
}

// Host is one hypervisor of a kvm provider.
type Host struct {
	// Address is host, host:port, [v6] or [v6]:port.
	Address string `yaml:"address"`
	// Name is the target name; after loading it is never empty (it defaults to the address).
	Name string `yaml:"name,omitempty"`
	// Labels are the host's own labels, over the provider's (config.Provider.Labels). They
	// change no check: Equal leaves them out.
	Labels map[string]string `yaml:"labels,omitempty"`
}

// HostBound is the longest one check of a host can take: every stage of a dial and every call
// running out its bound (tcp + 2 × ssh + 2 × libvirt + CallsPerCheck × rpc). A host holds one
// of the provider's concurrency slots at most this long, a retry after a lost connection
// included.
func (k *Config) HostBound() time.Duration {
	return k.TCPTimeout + 2*k.SSHTimeout + 2*k.LibvirtTimeout + CallsPerCheck*k.RPCTimeout
}

// HostBoundArithmetic spells out HostBound, for messages.
func (k *Config) HostBoundArithmetic() string { return k.hostBoundArithmetic(0) }

// hostBoundArithmetic is HostBoundArithmetic with the bounds in derived (a bit set of
// bound.bit, from fitBounds) marked as derived from the round's deadline.
func (k *Config) hostBoundArithmetic(derived uint8) string {
	var terms []string
	for _, b := range k.bounds() {
		t := fmt.Sprintf("%s %v", b.name, *b.value)
		if derived&(1<<b.bit) != 0 {
			t += " (derived)"
		}
		switch {
		case b.name == "rpcTimeout":
			t = fmt.Sprintf("%d calls × %s", b.weight, t)
		case b.weight > 1:
			t = fmt.Sprintf("%d × %s", b.weight, t)
		}
		terms = append(terms, t)
	}
	return strings.Join(terms, " + ") + fmt.Sprintf(" = %v", k.HostBound())
}

// bound is one of the stage bounds of a host's check, with its weight in HostBound.
type bound struct {
	name   string
	value  *time.Duration
	def    time.Duration
	weight int
	bit    uint
	set    bool // the providers file sets it
}

func (k *Config) bounds() []*bound {
	return []*bound{
		{name: "tcpTimeout", value: &k.TCPTimeout, def: DefaultTCPTimeout, weight: 1, bit: 0},
		{name: "sshTimeout", value: &k.SSHTimeout, def: DefaultSSHTimeout, weight: 2, bit: 1},
		{name: "libvirtTimeout", value: &k.LibvirtTimeout, def: DefaultLibvirtTimeout, weight: 2, bit: 2},
		{name: "rpcTimeout", value: &k.RPCTimeout, def: DefaultRPCTimeout, weight: CallsPerCheck, bit: 3},
	}
}

// fitBounds derives the bounds the file does not set from a round's deadline rt, when with
// their defaults a host's bounds would not fit it: each is its default scaled by one factor,
// (rt − the share of the bounds the file sets) / (the share of the defaults it does not set),
// rounded down to the millisecond and at least MinDialBound. The bounds keep their proportions,
// and together they fit rt unless the bounds the file sets leave no room (the caller refuses
// the block then). It returns the derived bounds as a bit set of bound.bit.
func fitBounds(bounds []*bound, rt time.Duration) (derived uint8) {
	var setShare, unsetShare time.Duration
	for _, b := range bounds {
		if b.set {
			setShare += time.Duration(b.weight) * *b.value
		} else {
			unsetShare += time.Duration(b.weight) * b.def
		}
	}
	if unsetShare == 0 || setShare >= rt {
		return 0
	}
	factor := float64(rt-setShare) / float64(unsetShare)
	for _, b := range bounds {
		if b.set {
			continue
		}
		*b.value = max(MinDialBound, time.Duration(float64(b.def)*factor).Truncate(time.Millisecond))
		derived |= 1 << b.bit
	}
	return derived
}

// Equal reports whether o is the same block, hosts included.
// TargetLabels maps each host's target name to its own labels (config.TargetLabeler).
func (k *Config) TargetLabels() map[string]map[string]string {
	var out map[string]map[string]string
	for _, h := range k.Hosts {
		if len(h.Labels) > 0 {
			if out == nil {
				out = make(map[string]map[string]string)
			}
			out[h.Name] = h.Labels
		}
	}
	return out
}

func (k *Config) Equal(o config.Block) bool {
	ok, is := o.(*Config)
	if !is {
		return false
	}
	if !slices.EqualFunc(k.Hosts, ok.Hosts, func(a, b Host) bool { return a.Address == b.Address && a.Name == b.Name }) {
		return false
	}
	a, b := *k, *ok
	a.Hosts, b.Hosts = nil, nil
	return reflect.DeepEqual(a, b)
}

// TargetFilePatterns are the hostFiles globs (config.Inventory).
func (k *Config) TargetFilePatterns() []string { return k.HostFiles }

// TargetProblem says what is wrong with a host of a host file: its address (host, host:port,
// [v6] or [v6]:port).
func (k *Config) TargetProblem(target string) string {
	_, _, problem := config.ParseAddress(target, cmp.Or(k.Port, DefaultPort))
	return problem
}

// WithTargets returns a copy of the block with the hosts of the host files after its own: each
// named by its address, with its group's labels. A host whose name or address the block
// already has (its own hosts, or an earlier file) is left out, with a warning.
func (k *Config) WithTargets(files []config.TargetFile) (config.Block, []string) {
	n := *k
	n.Hosts = slices.Clone(k.Hosts)
	owner := map[string]string{} // name or dial address -> where it is listed
	for _, h := range n.Hosts {
		owner[h.Name] = "hosts"
		owner[h.DialAddress(k.Port)] = "hosts"
	}
	var warnings []string
	for _, f := range files {
		for _, g := range f.Groups {
			for i, t := range g.Targets {
				h := Host{Address: t, Name: t, Labels: g.Labels}
				addr := h.DialAddress(k.Port)
				where, dup := owner[t]
				if !dup {
					where, dup = owner[addr]
				}
				if dup {
					line := 0
					if i < len(g.Lines) {
						line = g.Lines[i]
					}
					warnings = append(warnings, fmt.Sprintf("%s:%d: host %s is already listed in %s; left out", f.Path, line, config.Quote(t), where))
					continue
				}
				owner[t], owner[addr] = f.Path, f.Path
				n.Hosts = append(n.Hosts, h)
			}
		}
	}
	if k.ConcurrencyDerived {
		n.Concurrency = DefaultConcurrencyFor(len(n.Hosts))
	}
	return &n, warnings
}

// Files are the key, its passphrase and known_hosts (unless host keys are not verified).
func (k *Config) Files() []config.File {
	fs := []config.File{
		{Field: "privateKeyFile", Path: k.PrivateKeyFile, Secret: true},
		{Field: "passphraseFile", Path: k.PassphraseFile, Secret: true},
	}
	if !k.InsecureSkipHostKeyVerification {
		fs = append(fs, config.File{Field: "knownHostsFile", Path: k.KnownHostsFile})
	}
	return fs
}

// Warnings says that host keys are not verified, when they are not.
func (k *Config) Warnings(provider string) []string {
	if !k.InsecureSkipHostKeyVerification {
		return nil
	}
	w := fmt.Sprintf("provider %q: SSH host key verification is off (insecureSkipHostKeyVerification: true): "+
		"any machine answering at a host's address is trusted", provider)
	if k.KnownHostsFile != "" {
		w += "; knownHostsFile is ignored"
	}
	return []string{w}
}

// DefaultConcurrencyFor is a provider's concurrency when its block sets none: 32, or one slot
// per 20 hosts in a provider of more than 640 (250 at 5,000 hosts), at most MaxConcurrency. A
// slot then dials at most 20 hosts in the first round after a start; a dial costs about a
// dozen network round trips (TCP, the SSH handshake and authentication, the channel, libvirt's
// connect, the first check's calls), 0.6 s at 50 ms, so the first round's dials fit in 12 s of
// the default 15 s timeout (docs/benchmarks.md, KVM over latency). A round counts the hosts it
// checks (a sharded replica's share: Checker.check), not the hosts configured.
func DefaultConcurrencyFor(hosts int) int {
	return min(MaxConcurrency, max(DefaultConcurrency, (hosts+hostsPerSlot-1)/hostsPerSlot))
}

var hostFields = config.YAMLKeys[Host]()

func decode(f *config.Fields) config.Block {
	k := &Config{}
	errs := f.Problems()
	k.User = f.Required("user", "")
	k.PrivateKeyFile = f.File("privateKeyFile", true, "")
	k.PassphraseFile = f.File("passphraseFile", false, "")
	k.InsecureSkipHostKeyVerification = f.Bool("insecureSkipHostKeyVerification")
	k.KnownHostsFile = f.File("knownHostsFile", !k.InsecureSkipHostKeyVerification,
		" (required unless insecureSkipHostKeyVerification: true)")
	k.Port = f.Int("port", DefaultPort, 1, 65535)
	k.Socket = cmp.Or(f.String("socket", socketProblem), DefaultSocket)
	k.StoragePool = f.Required("storagePool", "")
	k.Concurrency = f.Int("concurrency", 0, 1, MaxConcurrency) // 0: derived from the hosts below
	bounds := k.bounds()
	for _, b := range bounds {
		*b.value = f.Duration(b.name, b.def, MinDialBound, MaxDialBound)
		b.set = f.Set(b.name)
	}
	if rt := f.RoundTimeout(); rt > 0 && f.Problems() == errs && k.HostBound() > rt {
		derived := fitBounds(bounds, rt)
		if k.HostBound() > rt {
			f.Errorf(nil, "", "a host's bounds add up to more than a round's deadline of %v (--provider-check-timeout): %s; "+
				"a host that runs them out would hold its concurrency slot past the round. Lower the bounds or raise the timeout",
				rt, k.hostBoundArithmetic(derived))
		}
	}
	k.HostFiles = decodeHostFiles(f)
	k.Hosts = decodeHosts(f, k.Port, len(k.HostFiles) > 0 || f.Has("hostFiles"))
	if k.Concurrency == 0 {
		k.Concurrency = DefaultConcurrencyFor(len(k.Hosts))
		k.ConcurrencyDerived = true
	}
	return k
}

// decodeHostFiles reads hostFiles: globs of file_sd files, each ending in .json, .yml or .yaml.
func decodeHostFiles(f *config.Fields) []string {
	return f.Paths("hostFiles", config.TargetFilePatternProblem)
}

// hostUse remembers where a host name or address was first used.
type hostUse struct {
	index, line int
}

// decodeHosts reads hosts: at least one, unless the block names host files (fromFiles).
func decodeHosts(f *config.Fields, defaultPort int, fromFiles bool) []Host {
	items, key, present, ok := f.List("hosts")
	switch {
	case !ok:
		return nil
	case fromFiles && len(items) == 0:
		return nil
	case !present:
		f.Errorf(nil, "hosts", "missing required field (a list of at least one host, or hostFiles)")
		return nil
	case len(items) == 0:
		f.Errorf(key, "hosts", "must list at least one host (or set hostFiles)")
		return nil
	}
	var hosts []Host
	names := map[string]hostUse{}
	addrs := map[string]hostUse{}
	for i, item := range items {
		hp := config.Index("hosts", i)
		hm, ok := f.Mapping(item, config.Join(f.Path(), hp), hostFields)
		if !ok {
			continue
		}
		addr, av := hm.RequiredNode("address", " (host, host:port or [v6]:port)")
		if addr == "" {
			continue
		}
		if _, _, problem := config.ParseAddress(addr, defaultPort); problem != "" {
			hm.Errorf(av, "address", "%s", problem)
			continue
		}
		dupAddr := false
		key := strings.ToLower(config.DialAddress(addr, defaultPort))
		if first, dup := addrs[key]; dup {
			hm.Errorf(av, "address", "duplicate address %s (first used by hosts[%d] at line %d)",
				config.Quote(addr), first.index, first.line)
			dupAddr = true
		} else {
			addrs[key] = hostUse{index: i, line: av.Line}
		}
		name, nv := hm.StringNode("name", controlProblem, config.TargetNameProblem)
		if name == "" {
			// The address names the host: the object carries it as the target's name.
			name, nv = addr, av
			if p := config.TargetNameProblem(name); p != "" {
				hm.Errorf(av, "address", "%s", p)
			}
		}
		if first, dup := names[name]; dup {
			// The same address twice is already reported; its defaulted name would only repeat it.
			if !dupAddr {
				hm.Errorf(nv, "name", "duplicate target name %s (first used by hosts[%d] at line %d)",
					config.Quote(name), first.index, first.line)
			}
		} else {
			names[name] = hostUse{index: i, line: nv.Line}
		}
		hosts = append(hosts, Host{Address: addr, Name: name, Labels: hm.Labels()})
	}
	return hosts
}

// socketProblem checks the libvirt socket's path: a path on the remote host, never resolved
// locally.
func socketProblem(socket string) string {
	if !strings.HasPrefix(socket, "/") || strings.ContainsRune(socket, 0) {
		return "invalid socket " + config.Quote(socket) + ": must be an absolute path on the host"
	}
	return ""
}

// controlProblem refuses a host's name with control characters.
func controlProblem(name string) string {
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return "invalid name " + config.Quote(name) + ": must not contain control characters"
	}
	return ""
}

// DialAddress is the host's host:port to dial: its address, with defaultPort (the provider's
// port) when the address carries none.
func (h Host) DialAddress(defaultPort int) string { return config.DialAddress(h.Address, defaultPort) }

// PoolSamples are the values of the pool gauges of one check (exported for the tests of the
// packages that serve them).
func PoolSamples(pool string, capacity, allocation, available uint64) []checks.Sample {
	labels := []string{pool}
	return []checks.Sample{
		{Gauge: poolCapacity, Value: float64(capacity), LabelValues: labels},
		{Gauge: poolAllocation, Value: float64(allocation), LabelValues: labels},
		{Gauge: poolAvailable, Value: float64(available), LabelValues: labels},
	}
}
