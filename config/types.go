package config

import (
	"fmt"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// Defaults the loader applies. They are the one source of truth: the docs and tests are checked
// against them, and code that needs a default reads it here.
const (
	// DefaultLabelSelector is a kubernetes provider's labelSelector when the key is absent: the
	// platform's managed-by label. `labelSelector: ""` means no selector at all.
	DefaultLabelSelector = "app.kubernetes.io/managed-by=proxy-operator"
	// DefaultKubernetesVersion and DefaultKubernetesResource name what a kubernetes provider lists
	// when neither is set: core v1 pods.
	DefaultKubernetesVersion  = "v1"
	DefaultKubernetesResource = "pods"
	// DefaultGCPFilter is a gcp provider's filter when the key is absent: the platform's
	// managed-by label. `filter: ""` means no filter at all.
	DefaultGCPFilter = "labels.managed-by=proxy-operator"
	// DefaultKVMPort is the SSH port of a kvm host whose address carries none.
	DefaultKVMPort = 22
	// DefaultLibvirtSocket is the libvirt socket path on a kvm host.
	DefaultLibvirtSocket = "/var/run/libvirt/libvirt-sock"
	// DefaultKVMConcurrency is how many hosts of one kvm provider are checked at once, at
	// least: see DefaultKVMConcurrencyFor.
	DefaultKVMConcurrency = 32
	// hostsPerSlot is how many hosts one concurrency slot is given by default in a large
	// provider (DefaultKVMConcurrencyFor).
	hostsPerSlot = 20
	// MaxKVMConcurrency bounds concurrency: more SSH sessions at once than this only queues
	// inside the exporter.
	MaxKVMConcurrency = 1024
)

// The bounds of a kvm check (tcpTimeout, sshTimeout, libvirtTimeout, rpcTimeout) when the block
// sets none, and the range a block may set. The defaults add up to 10s per host (see
// KVMConfig.HostBound), so that they fit the shortest round the flags derive by default
// (min(15s, interval) with an interval of at least 10s).
const (
	DefaultKVMTCPTimeout     = 2 * time.Second
	DefaultKVMSSHTimeout     = 2 * time.Second
	DefaultKVMLibvirtTimeout = time.Second
	DefaultKVMRPCTimeout     = 500 * time.Millisecond
	MinKVMDialBound          = 10 * time.Millisecond
	MaxKVMDialBound          = time.Minute
)

// KVMCallsPerCheck is how many libvirt calls one check of a host makes, each bounded by
// rpcTimeout.
const KVMCallsPerCheck = 4

// Config is the providers file (--config.file), validated and with every default applied.
type Config struct {
	// Providers in file order. May be empty: an exporter without providers runs no checks.
	Providers []Provider `yaml:"providers"`
}

// Provider is one entry of the providers file: a name, a type and the block for that type.
// Exactly the block named by Type is set.
type Provider struct {
	// Name is a DNS-1123 label, unique in the file; also the ProviderHealth object's name.
	Name string `yaml:"name"`
	// Type is one of checks.Types.
	Type       checks.ProviderType `yaml:"type"`
	Kubernetes *KubernetesConfig   `yaml:"kubernetes,omitempty"`
	GCP        *GCPConfig          `yaml:"gcp,omitempty"`
	KVM        *KVMConfig          `yaml:"kvm,omitempty"`
}

// KubernetesConfig is the block of a `type: kubernetes` provider.
type KubernetesConfig struct {
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
}

// GCPConfig is the block of a `type: gcp` provider.
type GCPConfig struct {
	// Project is the GCP project ID.
	Project string `yaml:"project"`
	// CredentialsFile is a service-account key path (absolute after loading); empty means
	// Application Default Credentials.
	CredentialsFile string `yaml:"credentialsFile,omitempty"`
	// Filter is an instances.aggregatedList filter expression. After loading it is the filter to
	// use: DefaultGCPFilter when the key was absent, empty (no filter) when it was set to "".
	Filter string `yaml:"filter,omitempty"`
	// Endpoint overrides the Compute API endpoint (an absolute http or https URL).
	Endpoint string `yaml:"endpoint,omitempty"`
}

// KVMConfig is the block of a `type: kvm` provider.
type KVMConfig struct {
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
	// Concurrency bounds how many hosts of this provider are checked at once (default 32).
	Concurrency int `yaml:"concurrency,omitempty"`
	// TCPTimeout, SSHTimeout and LibvirtTimeout bound the stages of a dial to a host: the TCP
	// connect; the SSH handshake with host key verification, and again authentication; opening
	// the libvirt socket, and again libvirt's connect. RPCTimeout bounds each libvirt call of a
	// check. Defaults 2s, 2s, 1s, 500ms.
	TCPTimeout     time.Duration `yaml:"tcpTimeout,omitempty"`
	SSHTimeout     time.Duration `yaml:"sshTimeout,omitempty"`
	LibvirtTimeout time.Duration `yaml:"libvirtTimeout,omitempty"`
	RPCTimeout     time.Duration `yaml:"rpcTimeout,omitempty"`
	// Hosts are the provider's targets, at least one.
	Hosts []KVMHost `yaml:"hosts"`
}

// HostBound is the longest one check of a host can take: every stage of a dial and every call
// running out its bound (tcp + 2 × ssh + 2 × libvirt + KVMCallsPerCheck × rpc). A host holds
// one of the provider's concurrency slots at most this long, a retry after a lost connection
// included.
func (k *KVMConfig) HostBound() time.Duration {
	return k.TCPTimeout + 2*k.SSHTimeout + 2*k.LibvirtTimeout + KVMCallsPerCheck*k.RPCTimeout
}

// HostBoundArithmetic spells out HostBound, for messages.
func (k *KVMConfig) HostBoundArithmetic() string {
	return fmt.Sprintf("tcpTimeout %v + 2 × sshTimeout %v + 2 × libvirtTimeout %v + %d calls × rpcTimeout %v = %v",
		k.TCPTimeout, k.SSHTimeout, k.LibvirtTimeout, KVMCallsPerCheck, k.RPCTimeout, k.HostBound())
}

// KVMHost is one hypervisor of a kvm provider.
type KVMHost struct {
	// Address is host, host:port, [v6] or [v6]:port.
	Address string `yaml:"address"`
	// Name is the target name; after loading it is never empty (it defaults to the address).
	Name string `yaml:"name,omitempty"`
}

// DefaultKVMConcurrencyFor is a kvm provider's concurrency when its block sets none: 32, or one
// slot per 20 hosts in a provider of more than 640 (250 at 5,000 hosts), at most
// MaxKVMConcurrency. A slot then dials at most 20 hosts in the first round after a start; a
// dial costs about a dozen network round trips (TCP, the SSH handshake and authentication,
// the channel, libvirt's connect, the first check's calls), 0.6 s at 50 ms, so the first
// round's dials fit in 12 s of the default 15 s timeout (docs/benchmarks.md, KVM over latency).
func DefaultKVMConcurrencyFor(hosts int) int {
	return min(MaxKVMConcurrency, max(DefaultKVMConcurrency, (hosts+hostsPerSlot-1)/hostsPerSlot))
}
