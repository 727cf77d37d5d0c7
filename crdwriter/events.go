package crdwriter

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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
// RBAC role lets the writer create them.
func newEventRecorder(ctx context.Context, events typedcorev1.EventsGetter, m *metrics) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst,
		QPS:       1.0 / eventRefillSeconds,
	}))
	b.StartRecordingToSink(&countingSink{sink: &typedcorev1.EventSinkImpl{Interface: events.Events("")}, m: m})
	return b.NewRecorder(scheme, corev1.EventSource{Component: FieldManager}), b.Shutdown
}

// countingSink counts every Event write in the writes metric.
type countingSink struct {
	sink record.EventSink
	m    *metrics
}

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.sink.Create(e)
	s.m.count(writeEvent, err)
	return out, err
}

func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.sink.Update(e)
	s.m.count(writeEvent, err)
	return out, err
}

func (s *countingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out, err := s.sink.Patch(e, data)
	s.m.count(writeEvent, err)
	return out, err
}
