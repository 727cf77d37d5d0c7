package checks

// Names of provider types and reasons of the types this module ships, for the package's own
// tests, which cannot import the types' packages (they import this one): the tests' fake
// checkers report them as the real types would.
const (
	typeKVM        ProviderType = "kvm"
	typeGCP        ProviderType = "gcp"
	typeKubernetes ProviderType = "kubernetes"

	reasonTCPUnreachable     Reason = "TCPUnreachable"
	reasonSSHHandshakeFailed Reason = "SSHHandshakeFailed"
	reasonHostKeyMismatch    Reason = "HostKeyMismatch"
	reasonPoolInactive       Reason = "PoolInactive"
)
