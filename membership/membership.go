// Package membership tells a sharded replica (--shard.enabled) who the members of its shard
// are: the replicas of the same instance whose coordination.k8s.io Leases are live. Each
// replica holds a Lease of its own, named by its identity, and renews it; the members are the
// Leases labelled with the instance whose renewTime plus leaseDurationSeconds lies in the
// future. No replica leads and none counts spec.replicas: a replica that dies stops renewing
// and leaves when its Lease expires, one that stops releases its Lease (deletes it) first.
//
// When the API server cannot be reached, the last members seen are kept, so a replica goes on
// checking what it owned; a replica that never reached it sees itself alone and owns
// everything. main wires it in; ownership itself is checks/shard's.
//
// A member's Lease also carries its part (PartAnnotation): an opaque value the exporter gives
// (Options.Part), its owned verdicts, which the others read with the members (Parts). A
// replica that stops clears its Lease's holder (others see it gone at once) and keeps its
// part until it deletes the Lease at its exit; Leases that stay expired longer than GCAfter
// (left by killed pods) are deleted by the members.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// Labels of a member's Lease: InstanceLabel carries the instance (--crd.instance), so that
// separate deployments never mix; ShardLabel tells the shard's Leases from the writer's.
const (
	InstanceLabel = "providerhealth.io/instance"
	ShardLabel    = "providerhealth.io/shard"
	shardValue    = "member"
	// PartAnnotation holds a member's part (Options.Part).
	PartAnnotation = "providerhealth.io/part"
)

// MaxPart bounds a part: the API server takes at most 256 KiB of annotations per object.
const MaxPart = 192 << 10

// Defaults of the Lease timing: client-go leader election's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// maxMembers bounds the Leases one list reads (a page); more members than this is a
// misconfiguration, and the first maxMembers by name are used.
const maxMembers = 500

// GCAfter is how long after its last renewal an expired or released Lease of the instance is
// deleted by a member that lists it (one killed with SIGKILL, or whose exit could not delete
// it); until then its part stays readable, for the targets' handover.
const GCAfter = 5 * time.Minute

// Options configure a Membership.
type Options struct {
	// Config is the client configuration of the cluster holding the Leases.
	Config *rest.Config
	// Namespace of the Leases; Identity names this replica's Lease (a DNS-1123 subdomain);
	// Instance is the label value that groups a deployment's Leases.
	Namespace, Identity, Instance string
	// LeaseDuration is how long a Lease lives without renewal; RenewDeadline bounds each
	// request to the API server; RetryPeriod is the time between two renewals (and lists).
	// Zero: the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
	// OnChange, when set, is called (from Run's goroutine) with the new members whenever they
	// change.
	OnChange func(members []string)
	// Part, when set, gives the value published in this replica's Lease (PartAnnotation) at
	// each renewal; at most MaxPart bytes ("" or a longer one: none).
	Part func() string
	// OnParts, when set, is called (from Run's goroutine) after each read of the members with
	// the other Leases' parts, as Parts returns them.
	OnParts func(parts []Part)
}

// Part is another replica's published value, as the last read of the Leases found it.
type Part struct {
	// Identity names the replica; Live says whether it is a member (its Lease is live).
	Identity string
	Live     bool
	// Value is its PartAnnotation ("" when none).
	Value string
}

// Membership is this replica's view of its shard's members.
type Membership struct {
	o      Options
	client coordinationclient.LeasesGetter
	logger *slog.Logger

	mu      sync.Mutex
	members []string
	parts   []Part
	failing bool // the last renewal or list failed (logged once per outage)
	// failedSteps counts the steps that could not renew or list, in a row.
	failedSteps int

	membersGauge prometheus.Gauge
	changes      prometheus.Counter
}

// New returns the Membership of opts' identity; it contacts nothing until Run. Its members
// are the identity alone until the first list succeeds.
func New(o Options) (*Membership, error) {
	if o.Config == nil || o.Namespace == "" || o.Identity == "" || o.Instance == "" {
		return nil, errors.New("membership: a client configuration, namespace, identity and instance are needed")
	}
	o.LeaseDuration = cmpOr(o.LeaseDuration, DefaultLeaseDuration)
	o.RenewDeadline = cmpOr(o.RenewDeadline, DefaultRenewDeadline)
	o.RetryPeriod = cmpOr(o.RetryPeriod, DefaultRetryPeriod)
	if o.LeaseDuration < time.Second || o.RetryPeriod >= o.LeaseDuration || o.RenewDeadline > o.LeaseDuration {
		return nil, fmt.Errorf("membership: lease duration %s, renew deadline %s, retry period %s: want retry period < lease duration, renew deadline <= lease duration, lease duration >= 1s",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := rest.CopyConfig(o.Config)
	cfg.Timeout = o.RenewDeadline
	c, err := coordinationclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	m := &Membership{
		o: o, client: c, logger: o.Logger,
		members: []string{o.Identity},
		membersGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "members",
			Help: "Members of the shard this replica sees: replicas of its instance whose Leases are live, itself included.",
		}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "membership_changes_total",
			Help: "Changes of the members this replica sees.",
		}),
	}
	m.membersGauge.Set(1)
	return m, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Collectors are the membership's metrics, to register on the exporter's registry.
func (m *Membership) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.membersGauge, m.changes}
}

// Identity is this replica's identity.
func (m *Membership) Identity() string { return m.o.Identity }

// Members returns the members this replica sees, sorted; itself always among them.
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Join renews this replica's Lease and reads the members once, within the renew deadline, before
// Run: a replica that starts then begins with the members the API server lists. Without it a
// replica would be alone (and own every target) until its first step: a new pod of a rollout
// would check the whole fleet in its first round, opening an SSH session to every host. OnChange
// is not called: the caller reads Members. On an error the replica stays alone, as a lone
// replica that cannot reach the API server is.
func (m *Membership) Join(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	if err := m.renew(rctx); err != nil {
		return err
	}
	members, parts, err := m.list(rctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.members, m.parts = members, parts
	m.mu.Unlock()
	m.membersGauge.Set(float64(len(members)))
	return nil
}

// Parts returns the parts of the other Leases of the instance (live members, and Leases
// expired or released less than GCAfter ago), as the last read found them.
func (m *Membership) Parts() []Part {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.parts)
}

// Run renews this replica's Lease and reads the members every RetryPeriod until ctx is done,
// then releases the Lease (clears its holder: it is no member any more, its part stays), so
// that the others take over at their next read rather than at its expiry. Delete removes the
// Lease afterwards.
func (m *Membership) Run(ctx context.Context) {
	t := time.NewTicker(m.o.RetryPeriod)
	defer t.Stop()
	for {
		m.step(ctx)
		select {
		case <-ctx.Done():
			m.release()
			return
		case <-t.C:
		}
	}
}

// step renews the Lease and reads the members once.
func (m *Membership) step(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	err := m.renew(rctx)
	var members []string
	var parts []Part
	if err == nil {
		members, parts, err = m.list(rctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		first := !m.failing
		m.failing = true
		m.failedSteps++
		kept := slices.Clone(m.members)
		m.mu.Unlock()
		if first {
			m.logger.Warn("cannot renew the shard lease or read the members, keeping the members last seen", "members", kept, "err", err)
		}
		return
	}
	m.mu.Lock()
	if m.failing {
		m.logger.Info("shard lease renewed again")
	}
	m.failing, m.failedSteps = false, 0
	changed := !slices.Equal(members, m.members)
	old := m.members
	m.members, m.parts = members, parts
	m.mu.Unlock()
	m.membersGauge.Set(float64(len(members)))
	if m.o.OnParts != nil {
		m.o.OnParts(slices.Clone(parts))
	}
	if changed {
		m.changes.Inc()
		m.logger.Info("shard members changed", "members", members, "before", old)
		if m.o.OnChange != nil {
			m.o.OnChange(slices.Clone(members))
		}
	}
}

// renew creates this replica's Lease, or renews it.
func (m *Membership) renew(ctx context.Context) error {
	leases := m.client.Leases(m.o.Namespace)
	now := metav1.NewMicroTime(time.Now())
	dur := int32(m.o.LeaseDuration / time.Second)
	l, err := leases.Get(ctx, m.o.Identity, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:        m.o.Identity,
				Namespace:   m.o.Namespace,
				Labels:      map[string]string{InstanceLabel: m.o.Instance, ShardLabel: shardValue},
				Annotations: m.partAnnotations(nil),
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       &m.o.Identity,
				LeaseDurationSeconds: &dur,
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
	}
	if l.Labels[InstanceLabel] != m.o.Instance || l.Labels[ShardLabel] != shardValue {
		return fmt.Errorf("lease %s/%s exists without the labels %s=%s, %s=%s: it is not a shard member's Lease of this instance (another --shard.identity?)",
			m.o.Namespace, m.o.Identity, InstanceLabel, m.o.Instance, ShardLabel, shardValue)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != m.o.Identity {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = &m.o.Identity, &now
	}
	l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &dur, &now
	l.Annotations = m.partAnnotations(l.Annotations)
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
	}
	return nil
}

// partAnnotations returns annotations with this replica's part (Options.Part) set, or removed
// when there is none or it is larger than MaxPart.
func (m *Membership) partAnnotations(annotations map[string]string) map[string]string {
	var part string
	if m.o.Part != nil {
		part = m.o.Part()
	}
	if part == "" || len(part) > MaxPart {
		delete(annotations, PartAnnotation)
		return annotations
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[PartAnnotation] = part
	return annotations
}

// list reads the live members, sorted, this replica among them, and the others' parts. It
// deletes the Leases of the instance left expired or released for longer than GCAfter.
func (m *Membership) list(ctx context.Context) ([]string, []Part, error) {
	sel := labels.SelectorFromSet(labels.Set{InstanceLabel: m.o.Instance, ShardLabel: shardValue}).String()
	leases := m.client.Leases(m.o.Namespace)
	ls, err := leases.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: maxMembers})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the leases of instance %s in %s: %w", m.o.Instance, m.o.Namespace, err)
	}
	now := time.Now()
	members := []string{m.o.Identity}
	var parts []Part
	for i := range ls.Items {
		l := &ls.Items[i]
		if l.Name == m.o.Identity {
			continue
		}
		live := Live(l, now)
		if !live && m.garbage(l, now) {
			err := leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
			if err == nil || apierrors.IsNotFound(err) {
				m.logger.Info("deleted a shard lease left expired", "lease", m.o.Namespace+"/"+l.Name)
				continue
			}
			if !apierrors.IsConflict(err) {
				m.logger.Debug("cannot delete a shard lease left expired", "lease", m.o.Namespace+"/"+l.Name, "err", err)
			}
		}
		if live {
			members = append(members, l.Name)
		}
		parts = append(parts, Part{Identity: l.Name, Live: live, Value: l.Annotations[PartAnnotation]})
	}
	slices.Sort(members)
	return members, parts, nil
}

// garbage reports whether l, not live, was last renewed (or released; without a renewal:
// created) more than GCAfter before now.
func (m *Membership) garbage(l *coordinationv1.Lease, now time.Time) bool {
	last := l.CreationTimestamp.Time
	if r := l.Spec.RenewTime; r != nil {
		last = r.Time
	}
	return now.Sub(last) > GCAfter
}

// PodNamespace is the namespace of the pod this runs in (its service account's), else
// "default".
func PodNamespace() string {
	b, err := fileread.Read("/var/run/secrets/kubernetes.io/serviceaccount/namespace", fileread.CredentialLimit)
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}

// Live reports whether l is held and renewed within its duration at now.
func Live(l *coordinationv1.Lease, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second).After(now)
}

// release clears the holder of this replica's Lease: the others no longer count it a member
// at their next read, and its part stays readable for the handover until Delete.
func (m *Membership) release() {
	ctx, cancel := context.WithTimeout(context.Background(), m.o.RenewDeadline)
	defer cancel()
	leases := m.client.Leases(m.o.Namespace)
	l, err := leases.Get(ctx, m.o.Identity, metav1.GetOptions{})
	if err == nil {
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = nil, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		m.logger.Warn("cannot release the shard lease; the others take over when it expires", "lease", m.o.Namespace+"/"+m.o.Identity, "err", err)
		return
	}
	m.logger.Info("shard lease released", "lease", m.o.Namespace+"/"+m.o.Identity)
}

// Delete deletes this replica's Lease (only the one it created: preconditioned on its UID),
// once Run has returned: at the end of the replica's exit, when the others have read its part;
// within ctx and the renew deadline.
// A Lease it cannot delete is deleted by the others after GCAfter.
func (m *Membership) Delete(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	leases := m.client.Leases(m.o.Namespace)
	l, err := leases.Get(ctx, m.o.Identity, metav1.GetOptions{})
	if err == nil {
		err = leases.Delete(ctx, m.o.Identity, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID}})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		m.logger.Warn("cannot delete the shard lease; the others delete it later", "lease", m.o.Namespace+"/"+m.o.Identity, "err", err, "after", GCAfter)
	}
}
