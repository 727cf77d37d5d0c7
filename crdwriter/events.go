package crdwriter

import (
	"context"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Event budgets, per target of a ProviderHealth object: a burst of eventTargetBurst Events,
// then one per eventRefillSeconds. One target changing reason every round spends its own budget,
// never another target's; a provider's Events are also capped at maxPendingEvents per write
// (session.go). An Event over either limit is dropped and counted in
// proxy_operator_crd_writer_events_dropped_total; the status still shows every verdict.
const (
	eventTargetBurst   = 10
	eventRefillSeconds = 300
	// eventSpamBurst is client-go's own spam filter's burst, keyed like the target budgets
	// (eventSpamKey) and looser than them, so that every Event dropped is dropped (and
	// counted) by the writer, never silently by client-go.
	eventSpamBurst = 25
)

// TargetAnnotation is the annotation of each Event the writer records: the target it is about.
const TargetAnnotation = "providerhealth.io/target"

// eventBudgets are the per-target Event budgets of one term.
type eventBudgets map[string]*rate.Limiter

// allow spends one Event of the target's budget, if there is one left.
func (b eventBudgets) allow(provider, target string) bool {
	key := provider + "/" + target
	l := b[key]
	if l == nil {
		l = rate.NewLimiter(rate.Every(eventRefillSeconds*time.Second), eventTargetBurst)
		b[key] = l
	}
	return l.Allow()
}

// newEventRecorder returns a recorder whose Events land in the API server through core, rate
// limited by client-go's spam filter, and counted in the writes metric. Events about a
// cluster-scoped object are stored in the "default" namespace (as for Nodes), which is where the
// RBAC role lets the writer create them. allow (nil: always) is asked right before each write:
// the recorder sends Events asynchronously, so one queued by a leader can reach the sink after
// the lease is lost, and must then be dropped.
func newEventRecorder(ctx context.Context, events typedcorev1.EventsGetter, m *metrics, allow func() bool) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize:   eventSpamBurst,
		QPS:         1.0 / eventRefillSeconds,
		SpamKeyFunc: eventSpamKey,
		// Similar Events are combined per target too, not across the targets of an object.
		KeyFunc: func(e *corev1.Event) (string, string) {
			key, local := record.EventAggregatorByReasonFunc(e)
			return key + e.Annotations[TargetAnnotation], local
		},
	}))
	b.StartRecordingToSink(&countingSink{sink: &typedcorev1.EventSinkImpl{Interface: events.Events("")}, m: m, allow: allow})
	return b.NewRecorder(scheme, corev1.EventSource{Component: FieldManager}), b.Shutdown
}

// countingSink counts every Event write in the writes metric, and refuses writes that allow
// forbids.
type countingSink struct {
	sink  record.EventSink
	m     *metrics
	allow func() bool
}

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if !s.allowed() {
		return nil, errEventNotLeader
	}
	out, err := s.sink.Create(e)
	s.m.count(writeEvent, err)
	return out, err
}

func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if !s.allowed() {
		return nil, errEventNotLeader
	}
	out, err := s.sink.Update(e)
	s.m.count(writeEvent, err)
	return out, err
}

func (s *countingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if !s.allowed() {
		return nil, errEventNotLeader
	}
	out, err := s.sink.Patch(e, data)
	s.m.count(writeEvent, err)
	return out, err
}

// eventSpamKey is the key of client-go's spam filter: the object, the Event type and the target.
func eventSpamKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion,
		e.Type, e.Annotations[TargetAnnotation]}, "")
}

func (s *countingSink) allowed() bool { return s.allow == nil || s.allow() }
