package crdwriter

// One provider's write, as the sync loop (sync.go) asks for it: what memory wants, the create,
// whether a write is due (a visible difference, or the heartbeat), the status write and what
// its error means, and the Events that follow.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// syncProvider writes one provider's status when it differs visibly from the live object's or a
// heartbeat is due, creating the object when missing; then it records the provider's Events.
func (s *session) syncProvider(ctx context.Context, name string) error {
	want, ok := s.wanted(name)
	if !ok {
		return nil
	}
	if seen, ok := s.foreign[name]; ok && time.Since(seen) < s.w.opts.HeartbeatInterval {
		return nil // a name clash, re-checked once per heartbeat interval
	}
	live := s.live[name]
	if live == nil && s.reread[name] {
		got, ours, err := s.readAgain(ctx, name, "that changed since it was listed")
		if err != nil {
			return err
		}
		delete(s.reread, name)
		if !ours {
			return nil
		}
		live = got
		want.desired, want.events = s.adopt(name, live, want.desired, want.events)
	}
	for attempt := 0; attempt < 5; attempt++ {
		if live == nil {
			obj, err := s.createFor(ctx, name, &want)
			if obj == nil {
				return err
			}
			live = obj
		}
		now := time.Now()
		if want.seeded || !s.writeDue(name, live, &want, now) {
			s.emit(name, live, want.events)
			return nil
		}
		if s.holdBack(name, &want.desired, now) {
			return nil
		}
		if !s.mayWrite() {
			return errNotLeader
		}
		next, done, err := s.putStatus(ctx, name, live, &want, now)
		if done {
			return err
		}
		live = next
	}
	return fmt.Errorf("writing the status of ProviderHealth %s: %w", name, errStillConflicting)
}

// providerWant is what memory holds for one provider's object at a sync, read under the lock.
type providerWant struct {
	desired v1alpha1.ProviderHealthStatus
	// checked: this writer has seen a check of the provider. Until it has, a heartbeat would
	// vouch for verdicts read back from the object (a restart): only a visible change is
	// written.
	checked bool
	// seeded: read back from the live object and not listed by a snapshot since. Memory knows
	// no more than the object shows (and less of the targets its list left out), so nothing is
	// written before the provider's first round.
	seeded bool
	events []targetEvent // the provider's pending Events
}

// wanted reads what memory holds for the provider; false when it holds nothing.
func (s *session) wanted(name string) (providerWant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mem[name]
	if m == nil {
		return providerWant{}, false
	}
	return providerWant{
		desired: m.render(),
		checked: !m.lastChecked.IsZero(),
		seeded:  m.seed != nil,
		events:  slices.Clone(s.pending[name]),
	}, true
}

// createFor creates the provider's missing object and adopts it into want. It returns nil, with
// the error if there was one, when no object was created: held back, not ours, rejected.
func (s *session) createFor(ctx context.Context, name string, want *providerWant) (*v1alpha1.ProviderHealth, error) {
	if s.holdBack(name, nil, time.Now()) {
		return nil, nil
	}
	obj, err := s.create(ctx, name)
	if errors.Is(err, errNotOurs) || errors.Is(err, errRejected) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if _, ok := s.foreign[name]; ok {
		delete(s.foreign, name)
		s.w.metrics.nameClashes.Set(float64(len(s.foreign)))
		s.w.logger.Info("the name clash is over: the object is this instance's now", "provider", name)
	}
	s.live[name] = obj
	want.desired, want.events = s.adopt(name, obj, want.desired, want.events)
	return obj, nil
}

// writeDue reports whether want's status is to be written over live's now: it differs visibly,
// or a heartbeat is due, and the change is not a reason change held back (holdReason).
func (s *session) writeDue(name string, live *v1alpha1.ProviderHealth, want *providerWant, now time.Time) bool {
	hb := live.Status.LastHeartbeatTime
	heartbeatDue := want.checked && (hb == nil || now.Sub(hb.Time) >= s.w.opts.HeartbeatInterval)
	// A reason change held back earlier may be gone (the reason went back): only holdReason
	// holds it again, so the sync loop never waits for a write that is no longer wanted.
	delete(s.reasonHeld, name)
	if sameVisible(&live.Status, &want.desired) && !heartbeatDue {
		return false
	}
	return heartbeatDue || !s.holdReason(name, &live.Status, &want.desired, now)
}

// putStatus writes want's status to live's /status and records the Events. done reports that
// the sync is over, with err; otherwise the object changed under the write and next is the one
// to write again (nil: it is gone, create it again).
func (s *session) putStatus(ctx context.Context, name string, live *v1alpha1.ProviderHealth, want *providerWant, now time.Time) (next *v1alpha1.ProviderHealth, done bool, err error) {
	obj := live.DeepCopy()
	obj.Status = want.desired
	obj.Status.LastHeartbeatTime = &metav1.Time{Time: now.Truncate(time.Second)}
	obj.Status.Writer = s.w.writerID
	// The API server keeps an object's managedFields when an update carries none; sending
	// them back would add a third to every write (an entry per listed target).
	obj.ManagedFields = nil
	updated, err := s.w.objects.UpdateStatus(ctx, obj)
	s.w.metrics.count(writeStatus, err)
	switch {
	case err == nil:
		s.wrote[name] = true
		delete(s.reasonHeld, name)
		s.statusSubresourceFound()
		s.accepted(name)
		s.compareWithSent(name, &obj.Status, &updated.Status)
		s.live[name] = updated
		s.emit(name, updated, want.events)
		return nil, true, nil
	case apierrors.IsInvalid(err):
		s.reject(name, &want.desired, now, err)
		return nil, true, nil
	case apierrors.IsConflict(err):
		got, ours, rerr := s.readAgain(ctx, name, "after a conflict")
		return got, rerr != nil || !ours, rerr // got nil: gone, created again
	case apierrors.IsNotFound(err):
		// Either the object is gone, or it is there and /status is not (a CRD without the
		// status subresource): a read tells.
		got, ours, rerr := s.readAgain(ctx, name, "after its status was not found")
		switch {
		case rerr != nil || !ours:
			return nil, true, rerr
		case got == nil:
			// Deleted by someone: recreate it, with the transition times memory kept.
			s.w.logger.Info("the ProviderHealth object was deleted; recreating it", "provider", name)
			delete(s.live, name)
			return nil, false, nil
		case got.UID == live.UID:
			s.statusSubresourceMissing(now)
			return nil, true, nil
		default: // replaced by another object of ours: write that one
			return got, false, nil
		}
	default:
		return nil, true, fmt.Errorf("writing the status of ProviderHealth %s: %w", name, err)
	}
}

// readAgain reads the provider's object again and remembers it: nil when it is gone; ours is
// false when it belongs to someone else now (a name clash, reported).
func (s *session) readAgain(ctx context.Context, name, why string) (obj *v1alpha1.ProviderHealth, ours bool, err error) {
	got, err := s.w.objects.Get(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("re-reading ProviderHealth %s %s: %w", name, why, err)
	case !s.w.owns(got):
		s.clash(got)
		return nil, false, nil
	}
	s.otherWriter(name, got)
	s.live[name] = got
	return got, true, nil
}

// otherWriter reports a status of the provider's object written by another exporter process of
// this deployment's identity after this writer wrote the object in this term: two writers with
// one identity (replicas without leader election, two hosts with the same defaults) overwrite
// each other. Counted each time, logged once per other writer and term.
func (s *session) otherWriter(name string, got *v1alpha1.ProviderHealth) {
	other := got.Status.Writer
	if other == "" || other == s.w.writerID || !s.wrote[name] {
		return
	}
	s.w.metrics.otherWriters.Inc()
	if s.otherWriters[other] {
		return
	}
	s.otherWriters[other] = true
	s.w.logger.Error("another exporter process with this deployment's identity writes this instance's ProviderHealth objects: the two overwrite each other's writes and double the Events; run one writer per identity (--crd.leader-elect for replicas, a distinct --crd.instance per deployment)",
		"provider", name, "other_writer", other, "writer", s.w.writerID, "instance", s.w.opts.Instance, "deployment", s.w.deployment)
}

// adopt folds an object this writer had not read before (found when creating it, adopted after
// a name clash, or changed since it was listed) into the provider's memory: its older
// transition times where it agrees (providerMem.adopt), and no Event for a verdict it already
// shows. It returns the status and Events to write.
func (s *session) adopt(name string, obj *v1alpha1.ProviderHealth, desired v1alpha1.ProviderHealthStatus, events []targetEvent) (v1alpha1.ProviderHealthStatus, []targetEvent) {
	if obj.Status.Type == "" {
		return desired, events // a new object: nothing to take over
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mem[name]
	if m == nil {
		return desired, events
	}
	shown := m.adopt(&obj.Status)
	if len(shown) > 0 {
		keep := func(e targetEvent) bool { return e.eventType == corev1.EventTypeWarning && shown[e.target] }
		events = slices.DeleteFunc(events, keep)
		s.pending[name] = slices.DeleteFunc(s.pending[name], keep)
	}
	return m.render(), events
}

// holdReason reports whether the change from live to desired is one of reasons only and the
// object was written less than the minimum reason interval ago; then it notes when the change
// may be written.
func (s *session) holdReason(name string, live, desired *v1alpha1.ProviderHealthStatus, now time.Time) bool {
	min := s.w.opts.MinReasonInterval
	hb := live.LastHeartbeatTime
	if min <= 0 || hb == nil || !sameUpDown(live, desired) {
		return false
	}
	at := hb.Add(min)
	if !now.Before(at) {
		return false
	}
	s.reasonHeld[name] = at
	return true
}

// create creates the provider's object (no status: the API server ignores it on create), or
// returns the existing one when it is this instance's. When it belongs to someone else, it
// reports the clash and returns errNotOurs.
func (s *session) create(ctx context.Context, name string) (*v1alpha1.ProviderHealth, error) {
	obj := &v1alpha1.ProviderHealth{ObjectMeta: s.w.objectMeta(name)}
	if !s.mayWrite() {
		return nil, errNotLeader
	}
	created, err := s.w.objects.Create(ctx, obj)
	s.w.metrics.count(writeCreate, err)
	switch {
	case err == nil:
		s.w.logger.Info("created ProviderHealth", "provider", name)
		s.accepted(name)
		return created, nil
	case apierrors.IsAlreadyExists(err):
		got, gerr := s.w.objects.Get(ctx, name)
		if gerr != nil {
			return nil, fmt.Errorf("reading ProviderHealth %s: %w", name, gerr)
		}
		if !s.w.owns(got) {
			s.clash(got)
			return nil, errNotOurs
		}
		return got, nil
	case apierrors.IsNotFound(err):
		s.w.crdMissing()
		return nil, errCRDMissing
	case apierrors.IsInvalid(err):
		s.reject(name, nil, time.Now(), err)
		return nil, errRejected
	default:
		return nil, fmt.Errorf("creating ProviderHealth %s: %w", name, err)
	}
}

// emit records the provider's pending Events on its object, each within its target's budget
// (the others are dropped and counted), and forgets them.
func (s *session) emit(name string, obj *v1alpha1.ProviderHealth, events []targetEvent) {
	if len(events) == 0 {
		return
	}
	for _, e := range events {
		if !s.mayWrite() {
			return
		}
		if !s.budgets.allow(name, e.target) {
			s.w.metrics.eventsDropped.WithLabelValues(dropTargetBudget).Inc()
			continue
		}
		s.recorder.AnnotatedEventf(obj, map[string]string{TargetAnnotation: e.target}, e.eventType, e.reason, "%s", e.message)
	}
	last := events[len(events)-1].seq
	s.mu.Lock()
	defer s.mu.Unlock()
	// Events queued meanwhile stay for the next write; drop what was just recorded.
	s.pending[name] = slices.DeleteFunc(s.pending[name], func(e targetEvent) bool { return e.seq <= last })
}
