// Membership: who the members of the shard are, and the replicas' parts carried between them.
//
// Each replica holds a coordination.k8s.io Lease of its own, named by its
// identity, and renews it every RetryPeriod; the Lease is a heartbeat and carries liveness
// only (and one short annotation, RoundAnnotation, naming the part its last round confirmed).
// A member is a Lease of the instance, held, that this replica has seen change within the lease
// duration on its own clock: as client-go's leader election does, no remote timestamp is ever
// compared with the local clock, so replicas whose clocks disagree still agree on the members.
// Leases seen unchanged for GCAfter (left by killed pods) are deleted. A replica that cannot
// renew or list keeps the members it saw last; one that has never listed them (Joined false)
// has none, so that it owns nothing rather than everything.
//
// Parts: each replica writes its verdicts into a ProviderHealthPart object of its own name
// (crdwriter/v1alpha1), only when they changed (messages alone at most every PartRefresh), and
// reads the others' through a watch of their metadata, fetching a part when it changes. What a
// part holds is opaque here: part.go encodes and checks it.
//
// In a pod (MembershipOptions.Owner), the Lease and the part are owned by the pod, so that the
// garbage collector removes them with it even when the replica could not (killed, or its rights
// gone first at helm uninstall). Shard (shard.go) drives it; ownership itself is checks/shard's.

package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// Labels of a member's Lease and part: InstanceLabel carries the instance (--crd.instance), so
// that separate deployments never mix; ShardLabel tells the shard's Leases from the writer's.
const (
	InstanceLabel = "providerhealth.io/instance"
	ShardLabel    = "providerhealth.io/shard"
	shardValue    = "member"
	// RoundAnnotation, on a member's Lease, names the part its last finished round confirmed:
	// "<part sequence>/<the round's end, Unix milliseconds>" (at most 41 bytes).
	RoundAnnotation = "providerhealth.io/round"
)

// MaxPart bounds a part's data (compressed): ProviderHealthPart's spec.data.
const MaxPart = v1alpha1.MaxPartData

// PartRefresh is how often at most a part whose verdicts did not change is rewritten for its
// messages alone (a KVM host's free space, an error's text): as often as the ProviderHealth
// writer's heartbeat, which is when such a change reaches the objects anyway.
const PartRefresh = 5 * time.Minute

// Defaults of the Lease timing: client-go leader election's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// maxMembers bounds the Leases (and parts) one list reads (a page); more members than this is a
// misconfiguration, and the first maxMembers by name are used.
const maxMembers = 500

// maxJoinBackoff bounds the wait between two attempts of a replica that has not joined yet.
const maxJoinBackoff = 30 * time.Second

// GCAfter is how long a Lease of the instance, not held or not renewed, must have been seen
// unchanged (on this replica's clock) before a member deletes it, with its part: one left by a
// pod killed with SIGKILL, or whose exit could not delete it. Until then its part stays
// readable, for the targets' handover.
const GCAfter = 5 * time.Minute

// MembershipOptions configure a Membership.
type MembershipOptions struct {
	// Config is the client configuration of the cluster holding the Leases.
	Config *rest.Config
	// Namespace of the Leases; Identity names this replica's Lease (a DNS-1123 subdomain);
	// Instance is the label value that groups a deployment's Leases.
	Namespace, Identity, Instance string
	// LeaseDuration is how long a Lease lives without renewal; RenewDeadline bounds each
	// step (renewal, part write, list); RetryPeriod is the time between two renewals (and
	// lists; a quarter of it for a retry period after a list that found a member gone, see
	// departureReads). Zero: the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
	// Owner, when set (in a pod: the pod), owns the Lease and the part.
	Owner *metav1.OwnerReference
	// OnChange, when set, is called (from Run's goroutine) with the new members whenever they
	// change, and once when the replica first joins.
	OnChange func(members []string)
	// Part, when set, gives this replica's part at each step: the verdicts of its last
	// finished round. The part object is written when its Key changed, or its data changed
	// and the last write is older than PartRefresh.
	Part func() Publication
	// OnParts, when set, is called (from the watch's goroutine or Run's) with the others'
	// parts whenever one of them or the members changed.
	OnParts func(parts []Part)
	// Follow, when set, says whether this replica needs the others' parts as they change (it
	// writes the ProviderHealth objects, or is handing targets over). While it says no, the
	// parts' watch notes their versions and reads none: a part that changed since it was read
	// is dropped (Parts leaves it out) until Refresh reads it again. Nil: always.
	Follow func() bool
	// Working, when set, is asked before each renewal: an error means this replica's rounds
	// are wedged, and it releases its Lease (its share moves to the others) until they work
	// again.
	Working func() error
	// Now is the clock; time.Now when nil (tests set a skewed one).
	Now func() time.Time
}

// Publication is this replica's part, as MembershipOptions.Part gives it.
type Publication struct {
	// Data is the encoded part (at most MaxPart bytes); nil before the first round.
	Data []byte
	// Verdicts counts the verdicts Data holds.
	Verdicts int
	// CheckedAt is when the round Data comes from ended.
	CheckedAt time.Time
	// Key is what the verdicts say apart from their messages: a change of Key is written at
	// the next step.
	Key string
}

// Part is another replica's published part, as this replica last read it.
type Part struct {
	// Identity names the replica.
	Identity string
	// Live says whether it is a member; LastLive is when this replica last saw it live (its
	// own clock; zero if never).
	Live     bool
	LastLive time.Time
	// Data is the part's data; Sequence and CheckedAt its spec's.
	Data      []byte
	Sequence  int64
	CheckedAt time.Time
	// RoundAt is when the replica's last finished round ended, if its Lease says that round
	// confirmed this very part (same sequence); zero otherwise.
	RoundAt time.Time
}

// observed is what this replica knows of another Lease, on its own clock.
type observed struct {
	rv, holder string
	// changed is when this replica first saw the Lease, or saw its resourceVersion change.
	changed time.Time
	// lastLive is when it last judged the Lease live; deadLists counts the lists in a row
	// that found it not live (one alone never collects it).
	lastLive  time.Time
	deadLists int
	round     string
	uid       string
}

// refreshFetches is how many parts Refresh reads at once.
const refreshFetches = 4

// fetched is another replica's part object as last fetched.
type fetched struct {
	rv   string
	spec v1alpha1.ProviderHealthPartSpec
}

// Membership is this replica's view of its shard's members.
type Membership struct {
	o      MembershipOptions
	client coordinationclient.LeasesGetter
	parts  *gentype.ClientWithList[*v1alpha1.ProviderHealthPart, *v1alpha1.ProviderHealthPartList]
	meta   metadata.ResourceInterface
	logger *slog.Logger
	now    func() time.Time

	// notifyMu orders the calls of OnParts.
	notifyMu sync.Mutex
	mu       sync.Mutex
	members  []string
	joined   bool
	leases   map[string]*observed
	fetched  map[string]*fetched
	// known is each part object's resourceVersion as last listed or watched.
	known   map[string]string
	failing bool // the last step failed (logged once per outage)
	// failedSteps counts the steps that could not renew or list, in a row.
	failedSteps int
	wedged      string
	released    bool // this replica's Lease was released because its rounds are wedged

	// lease is this replica's Lease as it last wrote it (Join's, then Run's goroutine only).
	lease *coordinationv1.Lease
	// partObj is this replica's part as it last wrote it (Run's goroutine only).
	partObj *v1alpha1.ProviderHealthPart
	// pub is what this replica last wrote of its part (Run's goroutine only).
	pubKey     string
	pubData    []byte
	pubSeq     int64
	pubWritten time.Time
	pubUID     string
	pubAt      time.Time

	membersGauge prometheus.Gauge
	changes      prometheus.Counter
	partWrites   prometheus.Counter
	wedgedGauge  prometheus.Gauge
	releases     prometheus.Counter
}

// NewMembership returns the Membership of o's identity; it contacts nothing until Join or Run.
func NewMembership(o MembershipOptions) (*Membership, error) {
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
	if o.Now == nil {
		o.Now = time.Now
	}
	cfg := rest.CopyConfig(o.Config)
	cfg.Timeout = o.RenewDeadline
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	// Leases in protobuf: a renewal and a read of the members cost a third of their JSON.
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.ContentType = runtime.ContentTypeProtobuf
	leaseCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c, err := coordinationclient.NewForConfigAndClient(leaseCfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	pc, mc, err := partClients(cfg, httpClient, o.Namespace)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		o: o, client: c, parts: pc, meta: mc.Namespace(o.Namespace), logger: o.Logger, now: o.Now,
		leases:  map[string]*observed{},
		fetched: map[string]*fetched{},
		known:   map[string]string{},
		membersGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "members",
			Help: "Members of the shard this replica sees: replicas of its instance whose Leases it has seen renewed within the lease duration, itself included (0 until it has read them once).",
		}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "membership_changes_total",
			Help: "Changes of the members this replica sees.",
		}),
		partWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "part_writes_total",
			Help: "Writes of this replica's ProviderHealthPart: one when its verdicts changed, or their messages alone at most every " + PartRefresh.String() + ".",
		}),
		wedgedGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "wedged",
			Help: "1 while this replica's rounds of checks are wedged (the last finished longer ago than two intervals plus the timeout) and it has released its shard Lease, so that the others check its share.",
		}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "proxy_operator", Subsystem: "shard", Name: "wedged_releases_total",
			Help: "Times this replica released its shard Lease because its rounds were wedged.",
		}),
	}
	return m, nil
}

// partClients returns the typed client of the ProviderHealthPart objects of namespace and their
// metadata client.
func partClients(cfg *rest.Config, httpClient *http.Client, namespace string) (*gentype.ClientWithList[*v1alpha1.ProviderHealthPart, *v1alpha1.ProviderHealthPartList], metadata.Getter, error) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, nil, fmt.Errorf("membership: %w", err)
	}
	c := rest.CopyConfig(cfg)
	gv := v1alpha1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, nil, fmt.Errorf("membership: building the ProviderHealthPart client: %w", err)
	}
	mc, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, nil, fmt.Errorf("membership: building the ProviderHealthPart metadata client: %w", err)
	}
	return gentype.NewClientWithList(v1alpha1.PartResource, rc, metav1.ParameterCodec, namespace,
			func() *v1alpha1.ProviderHealthPart { return &v1alpha1.ProviderHealthPart{} },
			func() *v1alpha1.ProviderHealthPartList { return &v1alpha1.ProviderHealthPartList{} }),
		mc.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.PartResource)), nil
}

// cmpErr is the first of errs that is not nil.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Collectors are the membership's metrics, to register on the exporter's registry.
func (m *Membership) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.membersGauge, m.changes, m.partWrites, m.wedgedGauge, m.releases}
}

// Identity is this replica's identity.
func (m *Membership) Identity() string { return m.o.Identity }

// Members returns the members this replica sees, sorted: empty until it has joined, itself
// among them while it holds its Lease.
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Joined reports whether this replica has renewed its Lease and read the members once.
func (m *Membership) Joined() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.joined
}

// Join renews this replica's Lease and reads the members once, within the renew deadline,
// before Run, so that a new replica begins with the members the API server lists (a new pod
// of a rollout then checks only its share). OnChange is not called: the caller reads Members.
// On an error the replica has not joined: it owns nothing until Run succeeds.
func (m *Membership) Join(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	if err := m.renew(rctx, m.roundMarker()); err != nil {
		return err
	}
	members, err := m.list(rctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.members, m.joined = members, true
	m.mu.Unlock()
	m.membersGauge.Set(float64(len(members)))
	return nil
}

// Parts returns the others' parts as this replica last read them: those of the Leases it
// knows (members, and others not yet collected), with when it last saw each live.
func (m *Membership) Parts() []Part {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.partsLocked()
}

func (m *Membership) partsLocked() []Part {
	out := make([]Part, 0, len(m.fetched))
	for name, f := range m.fetched {
		ob := m.leases[name]
		if ob == nil {
			// A part without a Lease is nobody's: it never counts.
			continue
		}
		p := Part{
			Identity: name, Live: slices.Contains(m.members, name), LastLive: ob.lastLive,
			Data: f.spec.Data, Sequence: f.spec.Sequence, CheckedAt: f.spec.CheckedAt.Time,
		}
		if seq, at, ok := parseRound(ob.round); ok && seq == f.spec.Sequence {
			p.RoundAt = at
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Part) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// departureReads is how many times as often the members are read for a retry period after a
// read that found another member gone. Members leave together (a drain evicts several pods at
// once, a rollout replaces them in a row), and a read that falls between two releases hands the
// first leaver's targets, by rendezvous over the members still seen, partly to the second,
// which is leaving too and never checks them: this replica takes them only at its next read,
// which must come well within the first leaver's linger (two retry periods and 3 s at most, cut
// to 5 s by the exit's bound), not a whole retry period later. It costs a few reads per
// departure, none while the members stay.
const departureReads = 4

// Run renews this replica's Lease, publishes its part and reads the members every
// RetryPeriod (every RetryPeriod/departureReads for a retry period after a read that found
// another member gone), and follows the others' parts through a watch, until ctx is done. It
// then returns; Release and Delete are the caller's, within its shutdown deadline.
func (m *Membership) Run(ctx context.Context) {
	if m.o.OnParts != nil {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			m.watchParts(ctx)
		}()
		defer func() { <-watched }()
	}
	backoff := m.o.RetryPeriod
	var soonUntil time.Time
	for {
		before := m.Members()
		ok := m.step(ctx)
		wait := m.o.RetryPeriod
		switch {
		case !ok && !m.Joined():
			// Not joined yet: retry with a backoff, owning nothing meanwhile.
			wait, backoff = backoff, min(2*backoff, maxJoinBackoff)
		case ok && m.othersLeft(before):
			soonUntil = time.Now().Add(m.o.RetryPeriod)
		}
		if time.Now().Before(soonUntil) {
			wait = m.o.RetryPeriod / departureReads
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// othersLeft reports whether a member of before other than this replica is no member now.
func (m *Membership) othersLeft(before []string) bool {
	now := m.Members()
	for _, name := range before {
		if name != m.o.Identity && !slices.Contains(now, name) {
			return true
		}
	}
	return false
}

// step publishes the part, renews the Lease and reads the members once; it reports whether
// it could.
func (m *Membership) step(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	var err error
	if wedged := m.checkWorking(rctx); wedged {
		// Not a member while wedged: read the members only.
		var members []string
		members, err = m.list(rctx)
		if err == nil {
			m.setMembers(members)
		}
		return err == nil
	}
	// The renewal, the part's write and the read of the members at once, so that a slow API
	// server delays a renewal by one request's latency, not three. The Lease names the part
	// the last step published, so it never names one not written yet.
	marker := m.roundMarker()
	var members []string
	var listErr, pubErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		members, listErr = m.list(rctx)
	}()
	go func() {
		defer wg.Done()
		pubErr = m.publish(rctx)
	}()
	err = m.renew(rctx, marker)
	wg.Wait()
	err = cmpErr(err, listErr, pubErr)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		m.mu.Lock()
		first := !m.failing
		m.failing = true
		m.failedSteps++
		kept := slices.Clone(m.members)
		m.mu.Unlock()
		if first {
			m.logger.Warn("cannot renew the shard lease, write the part or read the members, keeping the members last seen", "members", kept, "err", err)
		}
		return false
	}
	m.mu.Lock()
	if m.failing {
		m.logger.Info("shard lease renewed again")
	}
	m.failing, m.failedSteps = false, 0
	m.mu.Unlock()
	m.setMembers(members)
	return true
}

// setMembers records members, tells OnChange when they changed (or this replica just joined)
// and OnParts.
func (m *Membership) setMembers(members []string) {
	m.mu.Lock()
	changed := !m.joined || !slices.Equal(members, m.members)
	old := m.members
	m.members, m.joined = members, true
	m.mu.Unlock()
	m.membersGauge.Set(float64(len(members)))
	if changed {
		m.changes.Inc()
		m.logger.Info("shard members changed", "members", members, "before", old)
		if m.o.OnChange != nil {
			m.o.OnChange(slices.Clone(members))
		}
	}
	m.partsChanged()
}

// checkWorking asks MembershipOptions.Working; a wedged replica releases its Lease once, and reports
// true until its rounds work again.
func (m *Membership) checkWorking(ctx context.Context) bool {
	if m.o.Working == nil {
		return false
	}
	werr := m.o.Working()
	m.mu.Lock()
	was := m.wedged != ""
	m.wedged = ""
	if werr != nil {
		m.wedged = werr.Error()
	}
	released := m.released
	m.mu.Unlock()
	switch {
	case werr != nil && !released:
		m.logger.Error("this replica's rounds of checks are wedged: releasing its shard lease, so that the others check its share", "err", werr)
		m.wedgedGauge.Set(1)
		m.releases.Inc()
		if err := m.Release(ctx); err == nil {
			m.mu.Lock()
			m.released = true
			m.mu.Unlock()
		}
		return true
	case werr != nil:
		return true
	case was || released:
		m.logger.Info("this replica's rounds of checks work again: taking its shard lease back")
		m.wedgedGauge.Set(0)
		m.mu.Lock()
		m.released = false
		m.mu.Unlock()
	}
	return false
}

// roundMarker is the value of this replica's RoundAnnotation: the part it last wrote, as
// confirmed by its last finished round; "" before any.
func (m *Membership) roundMarker() string {
	if m.pubData == nil || m.o.Part == nil {
		return ""
	}
	return strconv.FormatInt(m.pubSeq, 10) + "/" + strconv.FormatInt(m.pubAt.UnixMilli(), 10)
}

// parseRound parses a RoundAnnotation.
func parseRound(s string) (seq int64, at time.Time, ok bool) {
	a, b, found := strings.Cut(s, "/")
	if !found || len(s) > 41 {
		return 0, time.Time{}, false
	}
	seq, err1 := strconv.ParseInt(a, 10, 64)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || seq < 0 || ms < 0 {
		return 0, time.Time{}, false
	}
	return seq, time.UnixMilli(ms), true
}

// publish writes this replica's part when it changed (MembershipOptions.Part).
func (m *Membership) publish(ctx context.Context) error {
	if m.o.Part == nil {
		return nil
	}
	pub := m.o.Part()
	if pub.Data == nil || len(pub.Data) > MaxPart {
		return nil
	}
	now := m.now()
	due := pub.Key != m.pubKey || m.pubData == nil ||
		!slices.Equal(pub.Data, m.pubData) && now.Sub(m.pubWritten) >= PartRefresh
	if !due {
		// Unchanged: this round confirms the part written before.
		m.pubAt = pub.CheckedAt
		return nil
	}
	spec := v1alpha1.ProviderHealthPartSpec{
		Member: m.o.Identity, Sequence: m.pubSeq + 1, CheckedAt: metav1.NewTime(pub.CheckedAt),
		Verdicts: int32(min(pub.Verdicts, 1<<30)), Data: pub.Data,
	}
	if err := m.writePart(ctx, spec); err != nil {
		return err
	}
	m.partWrites.Inc()
	m.pubKey, m.pubData, m.pubSeq, m.pubWritten, m.pubAt = pub.Key, pub.Data, spec.Sequence, now, pub.CheckedAt
	return nil
}

// writePart creates or updates this replica's part object with spec: one update of the object
// it last wrote, or a read and a write when that one is gone or changed.
func (m *Membership) writePart(ctx context.Context, spec v1alpha1.ProviderHealthPartSpec) error {
	if obj := m.partObj; obj != nil {
		obj = obj.DeepCopy()
		obj.Spec = spec
		written, err := m.parts.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			m.partObj, m.pubUID = written, string(written.UID)
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("writing part %s/%s: %w", m.o.Namespace, m.o.Identity, err)
		}
		m.partObj = nil
	}
	obj, err := m.parts.Get(ctx, m.o.Identity, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj = &v1alpha1.ProviderHealthPart{ObjectMeta: m.objectMeta(), Spec: spec}
		if obj, err = m.parts.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating part %s/%s: %w", m.o.Namespace, m.o.Identity, err)
		}
		m.partObj, m.pubUID = obj, string(obj.UID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading part %s/%s: %w", m.o.Namespace, m.o.Identity, err)
	}
	if obj.Labels[InstanceLabel] != m.o.Instance {
		return fmt.Errorf("part %s/%s exists without the label %s=%s: it is not this instance's (another --shard.identity?)", m.o.Namespace, m.o.Identity, InstanceLabel, m.o.Instance)
	}
	obj.Spec = spec
	obj.OwnerReferences = m.ownerReferences()
	if obj, err = m.parts.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing part %s/%s: %w", m.o.Namespace, m.o.Identity, err)
	}
	m.partObj, m.pubUID = obj, string(obj.UID)
	return nil
}

// objectMeta is the metadata of this replica's Lease and part.
func (m *Membership) objectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.o.Identity, Namespace: m.o.Namespace,
		Labels:          map[string]string{InstanceLabel: m.o.Instance, ShardLabel: shardValue},
		OwnerReferences: m.ownerReferences(),
	}
}

func (m *Membership) ownerReferences() []metav1.OwnerReference {
	if m.o.Owner == nil {
		return nil
	}
	return []metav1.OwnerReference{*m.o.Owner}
}

// renew creates this replica's Lease, or renews it, with round as its RoundAnnotation: one
// update of the Lease it last wrote, or a read and a write when that one is gone or changed.
func (m *Membership) renew(ctx context.Context, round string) error {
	leases := m.client.Leases(m.o.Namespace)
	if l := m.lease; l != nil {
		l = l.DeepCopy()
		m.renewed(l, round)
		if written, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			m.lease = written
			return nil
		} else if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renewing lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
		}
		m.lease = nil
	}
	l, err := leases.Get(ctx, m.o.Identity, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		now := metav1.NewMicroTime(m.now())
		l = &coordinationv1.Lease{ObjectMeta: m.objectMeta(), Spec: coordinationv1.LeaseSpec{AcquireTime: &now}}
		m.renewed(l, round)
		if l, err = leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
		}
		m.lease = l
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
	}
	if l.Labels[InstanceLabel] != m.o.Instance || l.Labels[ShardLabel] != shardValue {
		return fmt.Errorf("lease %s/%s exists without the labels %s=%s, %s=%s: it is not a shard member's Lease of this instance (another --shard.identity?)",
			m.o.Namespace, m.o.Identity, InstanceLabel, m.o.Instance, ShardLabel, shardValue)
	}
	m.renewed(l, round)
	if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing lease %s/%s: %w", m.o.Namespace, m.o.Identity, err)
	}
	m.lease = l
	return nil
}

// renewed sets l as this replica holding it now, with round as its only annotation (whatever
// else a Lease of ours carries, an older version's part, goes).
func (m *Membership) renewed(l *coordinationv1.Lease, round string) {
	now := metav1.NewMicroTime(m.now())
	dur := int32(m.o.LeaseDuration / time.Second)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != m.o.Identity {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = &m.o.Identity, &now
	}
	l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &dur, &now
	l.OwnerReferences = m.ownerReferences()
	l.Annotations = nil
	if round != "" {
		l.Annotations = map[string]string{RoundAnnotation: round}
	}
}

// selector selects the instance's shard Leases and parts.
func (m *Membership) selector() string {
	return labels.SelectorFromSet(labels.Set{InstanceLabel: m.o.Instance, ShardLabel: shardValue}).String()
}

// list reads the Leases of the instance and returns the live members, sorted, this replica
// among them unless it released its Lease. A Lease is live while it is held and this replica
// has seen it change within the lease duration, on its own clock. Leases seen unchanged for
// GCAfter are deleted, with their parts.
func (m *Membership) list(ctx context.Context) ([]string, error) {
	leases := m.client.Leases(m.o.Namespace)
	ls, err := leases.List(ctx, metav1.ListOptions{LabelSelector: m.selector(), Limit: maxMembers})
	if err != nil {
		return nil, fmt.Errorf("listing the leases of instance %s in %s: %w", m.o.Instance, m.o.Namespace, err)
	}
	now := m.now()
	var members []string
	var garbage []coordinationv1.Lease
	m.mu.Lock()
	if !m.released {
		members = append(members, m.o.Identity)
	}
	seen := make(map[string]bool, len(ls.Items))
	for i := range ls.Items {
		l := &ls.Items[i]
		if l.Name == m.o.Identity {
			continue
		}
		seen[l.Name] = true
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		ob := m.leases[l.Name]
		if ob == nil || ob.rv != l.ResourceVersion || ob.uid != string(l.UID) {
			if ob == nil {
				ob = &observed{}
				m.leases[l.Name] = ob
			}
			ob.rv, ob.uid, ob.changed = l.ResourceVersion, string(l.UID), now
		}
		ob.holder, ob.round = holder, l.Annotations[RoundAnnotation]
		if holder != "" && now.Sub(ob.changed) < m.o.LeaseDuration {
			ob.lastLive, ob.deadLists = now, 0
			members = append(members, l.Name)
			continue
		}
		ob.deadLists++
		if ob.deadLists > 1 && now.Sub(ob.changed) > GCAfter {
			garbage = append(garbage, *l)
		}
	}
	for name := range m.leases {
		if !seen[name] {
			delete(m.leases, name)
		}
	}
	m.mu.Unlock()
	for i := range garbage {
		m.collect(ctx, &garbage[i])
	}
	slices.Sort(members)
	return members, nil
}

// collect deletes l, a Lease seen unchanged for GCAfter, and its part, unless either changed
// since.
func (m *Membership) collect(ctx context.Context, l *coordinationv1.Lease) {
	lease := m.o.Namespace + "/" + l.Name
	err := m.client.Leases(m.o.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		m.logger.Info("deleted a shard lease left unrenewed", "lease", lease, "after", GCAfter)
		m.mu.Lock()
		delete(m.leases, l.Name)
		m.mu.Unlock()
		if err := m.parts.Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			m.logger.Debug("cannot delete the part of a shard lease left unrenewed", "part", lease, "err", err)
		}
	case !apierrors.IsConflict(err):
		m.logger.Debug("cannot delete a shard lease left unrenewed", "lease", lease, "err", err)
	}
}

// watchParts follows the others' part objects until ctx is done: it watches their metadata
// and fetches a part whose resourceVersion changed, so that memory holds one part per member,
// each bounded (MaxPart). It relists after any error, waiting a retry period.
func (m *Membership) watchParts(ctx context.Context) {
	for ctx.Err() == nil {
		if err := m.followParts(ctx); err != nil && ctx.Err() == nil {
			m.logger.Debug("watching the shard's parts", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.o.RetryPeriod):
		}
	}
}

// followParts lists the parts' metadata, fetches those that changed, then watches until the
// watch ends.
func (m *Membership) followParts(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	list, err := m.meta.List(lctx, metav1.ListOptions{LabelSelector: m.selector(), Limit: maxMembers})
	cancel()
	if err != nil {
		return fmt.Errorf("listing the parts: %w", err)
	}
	for name, rv := range m.listed(list) {
		m.changed(ctx, name, rv)
	}
	m.partsChanged()
	w, err := m.meta.Watch(ctx, metav1.ListOptions{LabelSelector: m.selector(), ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		return fmt.Errorf("watching the parts: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				return fmt.Errorf("watching the parts: %v", apierrors.FromObject(ev.Object))
			case watch.Bookmark:
				continue
			}
			o, ok := ev.Object.(*metav1.PartialObjectMetadata)
			if !ok || o.Name == m.o.Identity {
				continue
			}
			if ev.Type == watch.Deleted {
				m.mu.Lock()
				delete(m.fetched, o.Name)
				delete(m.known, o.Name)
				m.mu.Unlock()
			} else {
				m.changed(ctx, o.Name, o.ResourceVersion)
			}
			m.partsChanged()
		}
	}
}

// listed notes the parts a list found (their resourceVersions), forgets the others, and returns
// them.
func (m *Membership) listed(list *metav1.PartialObjectMetadataList) map[string]string {
	present := make(map[string]string, len(list.Items))
	for _, it := range list.Items {
		present[it.Name] = it.ResourceVersion
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.fetched {
		if _, ok := present[name]; !ok {
			delete(m.fetched, name)
		}
	}
	m.known = present
	return present
}

// changed notes that the part name is at rv: it reads it when this replica follows the parts
// (MembershipOptions.Follow), and drops the one held otherwise, unless it is at rv already.
func (m *Membership) changed(ctx context.Context, name, rv string) {
	m.mu.Lock()
	m.known[name] = rv
	m.mu.Unlock()
	if m.o.Follow == nil || m.o.Follow() {
		m.fetch(ctx, name, rv)
		return
	}
	m.mu.Lock()
	if f := m.fetched[name]; f != nil && f.rv != rv {
		delete(m.fetched, name)
	}
	m.mu.Unlock()
}

// Refresh lists the others' parts and reads those that changed since this replica last read
// them (refreshFetches at a time), all within ctx and the renew deadline, then tells OnParts. A
// replica that does not follow the parts (MembershipOptions.Follow) calls it when it needs them:
// before it goes on from their verdicts (a handover), or starts writing the ProviderHealth
// objects.
func (m *Membership) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	list, err := m.meta.List(ctx, metav1.ListOptions{LabelSelector: m.selector(), Limit: maxMembers})
	if err != nil {
		return fmt.Errorf("listing the parts: %w", err)
	}
	slots := make(chan struct{}, refreshFetches)
	var wg sync.WaitGroup
	for name, rv := range m.listed(list) {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			m.fetch(ctx, name, rv)
		})
	}
	wg.Wait()
	m.partsChanged()
	return ctx.Err()
}

// fetch reads the part name unless the one held is at rv already.
func (m *Membership) fetch(ctx context.Context, name, rv string) {
	if name == m.o.Identity {
		return
	}
	m.mu.Lock()
	f := m.fetched[name]
	m.mu.Unlock()
	if f != nil && f.rv == rv {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	obj, err := m.parts.Get(gctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			m.logger.Debug("cannot read a shard member's part", "part", m.o.Namespace+"/"+name, "err", err)
		}
		return
	}
	if obj.Labels[InstanceLabel] != m.o.Instance || obj.Spec.Member != name || len(obj.Spec.Data) > MaxPart {
		m.logger.Warn("ignoring a part that is not a member's of this instance", "part", m.o.Namespace+"/"+name)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.fetched[name]; f != nil && f.rv == m.known[name] && obj.ResourceVersion != f.rv {
		// Refresh and the watch read it at once, and the newer read came first.
		return
	}
	m.fetched[name] = &fetched{rv: obj.ResourceVersion, spec: obj.Spec}
}

// partsChanged tells OnParts, one call at a time (from Run's goroutine and the watch's), each
// with the parts as they are when it is made.
func (m *Membership) partsChanged() {
	if m.o.OnParts == nil {
		return
	}
	m.notifyMu.Lock()
	defer m.notifyMu.Unlock()
	m.o.OnParts(m.Parts())
}

// Release clears the holder of this replica's Lease, within ctx and the renew deadline: the
// others no longer count it a member at their next read, and its part stays readable for the
// handover until Delete. A replica that leaves calls it once Run has returned.
func (m *Membership) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.RenewDeadline)
	defer cancel()
	leases := m.client.Leases(m.o.Namespace)
	l, err := leases.Get(ctx, m.o.Identity, metav1.GetOptions{})
	if err == nil {
		now := metav1.NewMicroTime(m.now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = nil, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		m.logger.Warn("cannot release the shard lease; the others take over when it expires", "lease", m.o.Namespace+"/"+m.o.Identity, "err", err)
		return err
	}
	m.logger.Info("shard lease released", "lease", m.o.Namespace+"/"+m.o.Identity)
	return nil
}

// Delete deletes this replica's Lease and part (only those it created: preconditioned on their
// UIDs), once Run has returned: at the end of the replica's exit, when the others have read its
// part; within ctx and the renew deadline. What it cannot delete goes with the pod (Owner) or
// is deleted by the others after GCAfter.
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
	if m.pubUID == "" {
		return
	}
	uid := types.UID(m.pubUID)
	if err := m.parts.Delete(ctx, m.o.Identity, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		m.logger.Warn("cannot delete the shard part; the others delete it later", "part", m.o.Namespace+"/"+m.o.Identity, "err", err, "after", GCAfter)
	}
}
