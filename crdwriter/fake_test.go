package crdwriter

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// fakeObjects is an in-memory API server for ProviderHealth objects with the semantics the
// writer relies on: resource versions with conflicts, a status subresource that ignores the
// rest of the object, create ignoring status, deletes with a UID precondition. The unit tests
// use it; the integration tests use the real API server.
type fakeObjects struct {
	mu      sync.Mutex
	objs    map[string]*v1alpha1.ProviderHealth
	rv      int
	calls   map[string]int // by verb: list, get, create, status, delete
	noCRD   bool
	failAll error // every call fails with it (an unreachable API server)
	// conflictOnce makes the next status update of that name fail with a conflict after
	// bumping the object's resource version (someone else wrote it).
	conflictOnce map[string]bool
}

func newFakeObjects() *fakeObjects {
	return &fakeObjects{objs: map[string]*v1alpha1.ProviderHealth{}, calls: map[string]int{}, conflictOnce: map[string]bool{}}
}

var gr = schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.Resource}

func (f *fakeObjects) enter(verb string) error {
	f.calls[verb]++
	if f.failAll != nil {
		return f.failAll
	}
	if f.noCRD {
		return apierrors.NewNotFound(schema.GroupResource{}, "")
	}
	return nil
}

func (f *fakeObjects) nextRV() string {
	f.rv++
	return strconv.Itoa(f.rv)
}

func (f *fakeObjects) List(_ context.Context, selector string) ([]v1alpha1.ProviderHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("list"); err != nil {
		return nil, err
	}
	k, v, _ := strings.Cut(selector, "=")
	var out []v1alpha1.ProviderHealth
	for _, o := range f.objs {
		if o.Labels[k] == v {
			out = append(out, *o.DeepCopy())
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.ProviderHealth) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ListMeta is List without the statuses; it counts as a list.
func (f *fakeObjects) ListMeta(ctx context.Context, selector string) ([]metav1.ObjectMeta, error) {
	items, err := f.List(ctx, selector)
	var out []metav1.ObjectMeta
	for _, o := range items {
		out = append(out, o.ObjectMeta)
	}
	return out, err
}

func (f *fakeObjects) Get(_ context.Context, name string) (*v1alpha1.ProviderHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("get"); err != nil {
		return nil, err
	}
	o, ok := f.objs[name]
	if !ok {
		return nil, apierrors.NewNotFound(gr, name)
	}
	return o.DeepCopy(), nil
}

func (f *fakeObjects) Create(_ context.Context, obj *v1alpha1.ProviderHealth) (*v1alpha1.ProviderHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("create"); err != nil {
		return nil, err
	}
	if _, ok := f.objs[obj.Name]; ok {
		return nil, apierrors.NewAlreadyExists(gr, obj.Name)
	}
	o := obj.DeepCopy()
	o.Status = v1alpha1.ProviderHealthStatus{}
	o.UID = uuid.NewUUID()
	o.ResourceVersion = f.nextRV()
	o.CreationTimestamp = metav1.Now()
	f.objs[o.Name] = o
	return o.DeepCopy(), nil
}

func (f *fakeObjects) UpdateStatus(_ context.Context, obj *v1alpha1.ProviderHealth) (*v1alpha1.ProviderHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("status"); err != nil {
		return nil, err
	}
	o, ok := f.objs[obj.Name]
	if !ok {
		return nil, apierrors.NewNotFound(gr, obj.Name)
	}
	if f.conflictOnce[obj.Name] {
		delete(f.conflictOnce, obj.Name)
		o.ResourceVersion = f.nextRV()
	}
	if obj.ResourceVersion != o.ResourceVersion {
		return nil, apierrors.NewConflict(gr, obj.Name, fmt.Errorf("resource version %s, want %s", obj.ResourceVersion, o.ResourceVersion))
	}
	o.Status = *obj.Status.DeepCopy()
	// The API server keeps times at one-second precision.
	st := normalized(&o.Status)
	st.LastHeartbeatTime = obj.Status.LastHeartbeatTime
	o.Status = st
	o.ResourceVersion = f.nextRV()
	return o.DeepCopy(), nil
}

func (f *fakeObjects) Delete(_ context.Context, name string, uid types.UID, rv string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("delete"); err != nil {
		return err
	}
	o, ok := f.objs[name]
	if !ok {
		return apierrors.NewNotFound(gr, name)
	}
	if o.UID != uid || rv != "" && o.ResourceVersion != rv {
		return apierrors.NewConflict(gr, name, fmt.Errorf("precondition failed: UID or resourceVersion"))
	}
	delete(f.objs, name)
	return nil
}

func (f *fakeObjects) count(verb string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[verb]
}

func (f *fakeObjects) get(name string) *v1alpha1.ProviderHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.objs[name]; ok {
		return o.DeepCopy()
	}
	return nil
}

// put stores an object as someone else would (kubectl).
func (f *fakeObjects) put(obj *v1alpha1.ProviderHealth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := obj.DeepCopy()
	o.UID = uuid.NewUUID()
	o.ResourceVersion = f.nextRV()
	f.objs[o.Name] = o
}

func (f *fakeObjects) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.objs, name)
}

func (f *fakeObjects) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAll = err
}

// fakeSource is a check runner the test drives by hand.
type fakeSource struct {
	mu   sync.Mutex
	snap *checks.Snapshot
	subs []chan struct{}
}

func newFakeSource(providers ...checks.ProviderState) *fakeSource {
	return &fakeSource{snap: &checks.Snapshot{Providers: providers}}
}

func (s *fakeSource) Current() *checks.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

func (s *fakeSource) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs = append(s.subs, ch)
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.subs = slices.DeleteFunc(s.subs, func(c chan struct{}) bool { return c == ch })
		close(ch)
	})
	return ch
}

// publish makes providers the newest snapshot (a new round) and notifies subscribers.
func (s *fakeSource) publish(providers ...checks.ProviderState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap = &checks.Snapshot{Round: s.snap.Round + 1, RoundStarted: time.Now(), Providers: providers}
	for _, ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// ownedBy is the metadata of an object of the deployment with that instance and Lease
// ("namespace/name").
func ownedBy(name, instance, deployment string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{ManagedByLabel: ManagedByValue, InstanceLabel: instance},
		Annotations: map[string]string{DeploymentAnnotation: deployment},
	}
}

// target builds a verdict checked now; since is when it last flipped.
func target(name string, reason checks.Reason, msg string, since time.Time) checks.TargetState {
	return checks.TargetState{
		TargetResult: checks.TargetResult{Target: name, Up: reason == checks.ReasonReady, Reason: reason, Message: msg, CheckedAt: time.Now()},
		Since:        since,
	}
}

func provider(name string, typ checks.ProviderType, targets ...checks.TargetState) checks.ProviderState {
	return checks.ProviderState{Name: name, Type: typ, Targets: targets}
}

// drainEvents returns the Events recorded so far.
func drainEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
