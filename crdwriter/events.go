package crdwriter

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Event rate limits, per ProviderHealth object: a burst of eventBurst Events, then one per
// eventRefill. A flapping fleet of targets cannot flood the API server; the status still
// shows every verdict.
const (
	eventBurst         = 25
	eventRefillSeconds = 300
)

// newEventRecorder returns a recorder whose Events land in the API server through core, rate
// limited by client-go's spam filter, and counted in the writes metric. Events about a
// cluster-scoped object are stored in the "default" namespace (as for Nodes), which is where the
// RBAC role lets the writer create them. allow (nil: always) is asked right before each write:
// the recorder sends Events asynchronously, so one queued by a leader can reach the sink after
// the lease is lost, and must then be dropped.
func newEventRecorder(ctx context.Context, events typedcorev1.EventsGetter, m *metrics, allow func() bool) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst,
		QPS:       1.0 / eventRefillSeconds,
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

// errEventNotLeader is what the sink answers when this replica lost the lease. It is an API
// status error so that client-go's recorder drops the Event instead of retrying it.
var errEventNotLeader = apierrors.NewServiceUnavailable("not recording the Event: " + errNotLeader.Error())

func (s *countingSink) allowed() bool { return s.allow == nil || s.allow() }

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
