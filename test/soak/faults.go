package soak

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/gcefake"
)

// Lanes: which targets a fault kind applies to. Each lane holds at most one fault at a time.
const (
	laneKVM  = "kvm"  // one lane per host
	laneGCP  = "gcp"  // the gcp provider's one target
	laneKube = "kube" // the kubernetes provider's one target
)

// FaultKind is one fault of the matrix and its ground truth: the reasons its target must read
// while it holds. Every other target must read Ready unless a fault of its own holds.
type FaultKind struct {
	Name    string
	Lane    string
	Reasons []checks.Reason
	// Variants, when set, are the forms of the fault; each injection draws one, given to apply.
	Variants []string
	// apply and clear cause and repair the fault on target index i of its lane. They run on
	// the test's goroutine unless async is set (then they must not call the testing.TB).
	apply func(e *env, i int, variant string) error
	clear func(e *env, i int) error
	async bool
	// settle is how long after its clear the repair can take to reach the exporter, for a
	// reason outside the exporter's control; rounds that start meanwhile are not judged.
	settle time.Duration
}

// Kinds is the fault matrix: the faults the test environment can cause for real, each with the
// reasons a correct exporter gives while it holds.
var Kinds = []*FaultKind{
	{
		// sshd stopped and its connections cut (stopping the service alone leaves established
		// connections alive, which would rightly keep the host Ready): the port refuses.
		Name: "sshd-stopped", Lane: laneKVM, Reasons: []checks.Reason{kvm.ReasonTCPUnreachable},
		apply: func(e *env, i int, _ string) error {
			h := e.fleet.Hosts[i]
			h.StopSSHD()
			h.KillSSHConnections()
			return nil
		},
		clear: func(e *env, i int) error { e.fleet.Hosts[i].StartSSHD(); return nil },
	},
	{
		// libvirtd frozen: the pooled connection stays, the RPCs hang.
		Name: "libvirtd-sigstop", Lane: laneKVM, Reasons: []checks.Reason{checks.ReasonTimeout},
		apply: func(e *env, i int, _ string) error { e.fleet.Hosts[i].PauseLibvirtd(); return nil },
		clear: func(e *env, i int) error { e.fleet.Hosts[i].ResumeLibvirtd(); return nil },
	},
	{
		Name: "pool-destroyed", Lane: laneKVM, Reasons: []checks.Reason{kvm.ReasonPoolInactive},
		apply: func(e *env, i int, _ string) error { e.fleet.Hosts[i].DestroyPool(); return nil },
		clear: func(e *env, i int) error { e.fleet.Hosts[i].StartPool(); return nil },
	},
	{
		// Every packet to the host dropped. Two reasons are right, and which one depends only
		// on the state of the pooled link, not on luck: while the established link is still
		// open its RPCs get no reply before the deadline (Timeout: nothing answered, and
		// nothing tells a silent network from a hung daemon on a live link); once keepalive
		// has closed it, a new dial's SYN gets no answer within tcpTimeout (TCPUnreachable).
		// Variants: the established link kept (it stalls), or cut by the host as the drop
		// starts (the host's FIN still leaves: the rule drops what comes in), so the next
		// dial's SYN goes unanswered at once.
		Name: "packets-dropped", Lane: laneKVM, Reasons: []checks.Reason{kvm.ReasonTCPUnreachable, checks.ReasonTimeout},
		Variants: []string{"link kept", "link cut"},
		apply: func(e *env, i int, v string) error {
			e.fleet.Hosts[i].MakeUnreachable()
			if v == "link cut" {
				e.fleet.Hosts[i].KillSSHConnections()
			}
			return nil
		},
		clear: func(e *env, i int) error { e.fleet.Hosts[i].MakeReachable(); return nil },
		// A link kept through the drop still holds the check's call (and the keepalive its
		// abandonment sent) in TCP's retransmission queue: they are delivered at the next
		// retransmission, which TCP's doubling backoff puts up to 6.4s after a drop shorter than
		// the keepalive timeout (10s; a longer one closes the link). Until the call returns the
		// host reads Timeout ("has still not returned"), by design: no second link to a host
		// while a call on the first is outstanding.
		settle: 8 * time.Second,
	},
	{
		// New host keys (a reinstalled host: its connections are gone too). Restored by putting
		// the old keys back, so known_hosts is right again.
		Name: "host-key-swapped", Lane: laneKVM, Reasons: []checks.Reason{kvm.ReasonHostKeyMismatch},
		apply: func(e *env, i int, _ string) error {
			h := e.fleet.Hosts[i]
			saved, err := readHostKeys(h.Dir)
			if err != nil {
				return err
			}
			e.savedHostKeys[i] = saved
			h.ReplaceHostKey()
			h.KillSSHConnections()
			return nil
		},
		clear: func(e *env, i int) error {
			h := e.fleet.Hosts[i]
			for path, data := range e.savedHostKeys[i] {
				if err := os.WriteFile(path, data, 0o600); err != nil {
					return err
				}
			}
			h.StopSSHD()
			h.StartSSHD()
			return nil
		},
	},
	{
		// The host no longer authorizes the exporter's key (authorized_keys lists another
		// key) and its connections are cut: the next dial's authentication is refused.
		Name: "client-key-revoked", Lane: laneKVM, Reasons: []checks.Reason{kvm.ReasonSSHAuthFailed},
		apply: func(e *env, i int, _ string) error {
			pub, _, err := ed25519.GenerateKey(nil)
			if err != nil {
				return err
			}
			stranger, err := ssh.NewPublicKey(pub)
			if err != nil {
				return err
			}
			if err := writeAuthorizedKeys(e.fleet.Hosts[i].Dir, ssh.MarshalAuthorizedKey(stranger)); err != nil {
				return err
			}
			e.fleet.Hosts[i].KillSSHConnections()
			return nil
		},
		clear: func(e *env, i int) error {
			pub, err := os.ReadFile(e.fleet.ClientKeyPath + ".pub")
			if err != nil {
				return err
			}
			return writeAuthorizedKeys(e.fleet.Hosts[i].Dir, pub)
		},
	},
	{
		// GCE's answer to an exceeded rate quota: 403 with the quota's reason (either).
		Name: "gce-403-rate-limited", Lane: laneGCP, Reasons: []checks.Reason{gcp.ReasonRateLimited}, async: true,
		Variants: []string{gcefake.ReasonRateLimitExceeded, gcefake.ReasonUserRateLimitExceeded},
		apply:    func(e *env, _ int, v string) error { e.gce.SetRateLimited(v); return nil },
		clear:    func(e *env, _ int) error { e.gce.SetRateLimited(""); return nil },
	},
	{
		Name: "gce-429", Lane: laneGCP, Reasons: []checks.Reason{gcp.ReasonRateLimited}, async: true,
		apply: func(e *env, _ int, _ string) error { e.gce.SetFailure(http.StatusTooManyRequests); return nil },
		clear: func(e *env, _ int) error { e.gce.SetFailure(0); return nil },
	},
	{
		// A 403 that is not a rate quota: the permission is missing.
		Name: "gce-403-forbidden", Lane: laneGCP, Reasons: []checks.Reason{checks.ReasonForbidden}, async: true,
		apply: func(e *env, _ int, _ string) error { e.gce.SetFailure(http.StatusForbidden); return nil },
		clear: func(e *env, _ int) error { e.gce.SetFailure(0); return nil },
	},
	{
		Name: "gce-5xx", Lane: laneGCP, Reasons: []checks.Reason{checks.ReasonAPIError}, async: true,
		Variants: []string{"500", "503"},
		apply: func(e *env, _ int, v string) error {
			code, err := strconv.Atoi(v)
			e.gce.SetFailure(code)
			return err
		},
		clear: func(e *env, _ int) error { e.gce.SetFailure(0); return nil },
	},
	{
		// Answers slower than the whole round: nothing answers before the deadline.
		Name: "gce-slow", Lane: laneGCP, Reasons: []checks.Reason{checks.ReasonTimeout}, async: true,
		apply: func(e *env, _ int, _ string) error { e.gce.SetLatency(e.opts.Interval + e.opts.Timeout); return nil },
		clear: func(e *env, _ int) error { e.gce.SetLatency(0); return nil },
	},
	{
		// Pages without an item but with a nextPageToken: the API did answer, so Ready (the
		// check must read one page, not follow the tokens forever).
		Name: "gce-empty-pages", Lane: laneGCP, Reasons: []checks.Reason{checks.ReasonReady}, async: true,
		apply: func(e *env, _ int, _ string) error { e.gce.SetEmptyPages(true); return nil },
		clear: func(e *env, _ int) error { e.gce.SetEmptyPages(false); return nil },
	},
	{
		Name: "apiserver-stopped", Lane: laneKube, Reasons: []checks.Reason{checks.ReasonAPIUnreachable}, async: true,
		apply: func(e *env, _ int, _ string) error { return e.kube.Stop() },
		// The clear ends when the soak's identity can list again: just after a restart the
		// API server answers 403 for a moment (its RBAC cache is still filling), which the
		// exporter rightly reports as Forbidden.
		clear: func(e *env, _ int) error {
			if err := e.kube.Restart(); err != nil {
				return err
			}
			return e.waitKube(false)
		},
	},
	{
		Name: "rbac-removed", Lane: laneKube, Reasons: []checks.Reason{checks.ReasonForbidden}, async: true,
		apply: func(e *env, _ int, _ string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := e.kubeAdmin.RbacV1().ClusterRoleBindings().Delete(ctx, kubeRBACName, metav1.DeleteOptions{}); err != nil {
				return err
			}
			// The API server's authorizer learns of the change from a watch: the fault holds
			// once the identity is refused.
			return e.waitKube(true)
		},
		clear: func(e *env, _ int) error {
			if err := e.bindKubeRole(); err != nil {
				return err
			}
			return e.waitKube(false)
		},
	},
}

// rotationKind is the fleet-wide fault: the client key rotated in place (the key file and every
// host's authorized_keys), with every connection cut so the next dials must use the new key.
// Its truth is Ready on every host: nothing is wrong.
var rotationKind = &FaultKind{Name: "client-key-rotated", Lane: laneKVM, Reasons: []checks.Reason{checks.ReasonReady}}

func (e *env) rotateClientKey() {
	e.fleet.RotateClientKey()
	for _, h := range e.fleet.Hosts {
		h.KillSSHConnections()
	}
}

// kubeRBACName names the ClusterRole and ClusterRoleBinding that let the soak's identity list pods.
const kubeRBACName = "soak-list-pods"

func (e *env) bindKubeRole() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.kubeAdmin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeRBACName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kubeRBACName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kubeUser}},
	}, metav1.CreateOptions{})
	return err
}

// waitKube waits until the soak's identity is refused a list of pods (forbidden) or can list
// them (!forbidden), as the API server decides now.
func (e *env) waitKube(forbidden bool) error {
	c, err := kubernetes.NewForConfig(e.kube.ConfigFor(kubeUser))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
		cancel()
		if (forbidden && apierrors.IsForbidden(err)) || (!forbidden && err == nil) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s listing pods: want forbidden %v, got %v", kubeUser, forbidden, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readHostKeys reads a kvmhost host's host key files (ssh_host_<type>_key and .pub, which its
// sshd_config names), to put them back after ReplaceHostKey.
func readHostKeys(dir string) (map[string][]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "ssh_host_*_key*"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no host key files in %s", dir)
	}
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[p] = data
	}
	return out, nil
}

// writeAuthorizedKeys replaces a kvmhost host's authorized_keys (the file its sshd_config names
// as AuthorizedKeysFile; sshd reads it at each login).
func writeAuthorizedKeys(dir string, data []byte) error {
	path := filepath.Join(dir, "authorized_keys")
	tmp := path + ".soak"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// kindsOf lists the kinds of a lane.
func kindsOf(lane string) []*FaultKind {
	var out []*FaultKind
	for _, k := range Kinds {
		if k.Lane == lane {
			out = append(out, k)
		}
	}
	return out
}
