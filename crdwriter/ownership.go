package crdwriter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// Which objects are this instance's, garbage collection, and name clashes.

// ReasonNameClash is the reason of the Event recorded on an object that holds the name of one of
// this instance's providers but belongs to someone else.
const ReasonNameClash = "NameClash"

// The labels and the annotation that say which objects are this exporter's.
const (
	// ManagedByLabel marks the objects this exporter owns; objects without it are never touched.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value on our objects.
	ManagedByValue = "provider-health-exporter"
	// InstanceLabel holds the instance (the exporter deployment) an object belongs to.
	InstanceLabel = "providerhealth.io/instance"
	// DeploymentAnnotation holds the identity of the deployment that owns an object: the
	// namespace and name of its Lease ("namespace/name"). Two deployments with the same
	// instance in different namespaces have different identities, so they never take each
	// other's objects for their own.
	DeploymentAnnotation = "providerhealth.io/deployment"
)

// managedSelector selects the objects of every instance of the exporter.
var managedSelector = ManagedByLabel + "=" + ManagedByValue

// objectMeta is the metadata of the provider's object as this deployment creates it.
func (w *Writer) objectMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{ManagedByLabel: ManagedByValue, InstanceLabel: w.opts.Instance},
		Annotations: map[string]string{DeploymentAnnotation: w.deployment},
	}
}

// collectGarbage deletes the objects of providers no longer configured and refreshes what the
// session knows of the live objects and of name clashes. full lists whole objects (the start
// of a term: their statuses seed memory); otherwise only their metadata is read, and an object
// that changed since the writer last saw it is read again before its next write.
func (s *session) collectGarbage(ctx context.Context, full bool) error {
	names := configured(s.w.opts.Source.Current())
	mine, others, err := s.w.collectGarbage(ctx, func(n string) bool { return names[n] }, s.allowWrites(), full)
	if errors.Is(err, errCRDMissing) && s.w.checksOff != nil {
		err = nil // checks off: without the CRD there is nothing to delete
	}
	if err != nil {
		return err
	}
	if off := s.w.checksOff; off != nil && off.collected != nil {
		defer off.collected()
	}
	for name := range s.live {
		if !names[name] {
			delete(s.live, name)
		}
	}
	for name := range s.foreign {
		if !names[name] {
			delete(s.foreign, name)
		}
	}
	for name := range s.rejected {
		if !names[name] {
			delete(s.rejected, name)
		}
	}
	s.w.metrics.rejected.Set(float64(len(s.rejected)))
	for name := range s.failing {
		if !names[name] {
			delete(s.failing, name)
		}
	}
	for key := range s.budgets {
		if p, _, _ := strings.Cut(key, "/"); !names[p] {
			delete(s.budgets, key)
		}
	}
	s.w.metrics.failing.Set(float64(len(s.failing)))
	for i := range mine {
		obj := mine[i]
		if cur := s.live[obj.Name]; cur == nil || cur.UID != obj.UID || cur.ResourceVersion != obj.ResourceVersion {
			if full {
				s.live[obj.Name] = &obj
			} else {
				delete(s.live, obj.Name)
				s.reread[obj.Name] = true
			}
		}
	}
	for i := range others {
		if names[others[i].Name] {
			s.clash(&others[i])
		}
	}
	s.w.metrics.nameClashes.Set(float64(len(s.foreign)))
	return nil
}

// collectGarbage lists the exporter's objects, deletes this instance's objects whose provider
// keep rejects, and returns this instance's other objects and the other instances' objects.
// allow (nil: always) is asked before each delete; when it says no, it stops with errNotLeader.
// Without full it lists only the objects' metadata, and the objects it returns have no status.
func (w *Writer) collectGarbage(ctx context.Context, keep func(string) bool, allow func() bool, full bool) (mine, others []v1alpha1.ProviderHealth, err error) {
	var items []v1alpha1.ProviderHealth
	if full {
		items, err = w.objects.List(ctx, managedSelector)
	} else {
		var metas []metav1.ObjectMeta
		metas, err = w.objects.ListMeta(ctx, managedSelector)
		for _, m := range metas {
			items = append(items, v1alpha1.ProviderHealth{ObjectMeta: m})
		}
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			w.crdMissing()
			return nil, nil, errCRDMissing
		}
		return nil, nil, fmt.Errorf("listing ProviderHealth objects: %w", err)
	}
	w.crdPresent()
	var errs []error
	for i := range items {
		obj := &items[i]
		switch {
		case !w.owns(obj): // the selector does not tell instances apart; never trust a filter with a delete
			if obj.Labels[ManagedByLabel] == ManagedByValue {
				others = append(others, *obj)
			}
			continue
		case keep(obj.Name):
			mine = append(mine, *obj)
			continue
		}
		if allow != nil && !allow() {
			return nil, nil, errNotLeader
		}
		err := w.objects.Delete(ctx, obj.Name, obj.UID, obj.ResourceVersion)
		switch {
		case err == nil:
			w.metrics.count(writeDelete, nil)
			w.logger.Info("deleted ProviderHealth of a provider no longer configured", "provider", obj.Name)
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err): // replaced by someone since the list: not the object we meant
			w.metrics.count(writeDelete, err)
		case perObject(err):
			// That object's own problem (an admission policy refusing its delete): it stays,
			// and is tried again at the next collection; the other writes go on.
			w.metrics.count(writeDelete, err)
			w.logger.Warn("deleting the ProviderHealth of a provider no longer configured failed; it is tried again at the next garbage collection",
				"provider", obj.Name, "err", err)
		default:
			w.metrics.count(writeDelete, err)
			errs = append(errs, fmt.Errorf("deleting ProviderHealth %s: %w", obj.Name, err))
		}
	}
	return mine, others, errors.Join(errs...)
}

// owns reports whether obj belongs to this deployment: our managed-by label, our instance and
// our deployment identity. An object that lacks the instance label or the deployment
// annotation belongs to no deployment that can be told apart, so no writer takes it for its
// own (docs/crd.md says how to hand it over).
func (w *Writer) owns(obj *v1alpha1.ProviderHealth) bool { return w.ownsMeta(&obj.ObjectMeta) }

func (w *Writer) ownsMeta(m *metav1.ObjectMeta) bool {
	return m.Labels[ManagedByLabel] == ManagedByValue && m.Labels[InstanceLabel] == w.opts.Instance &&
		m.Annotations[DeploymentAnnotation] == w.deployment
}

func (w *Writer) crdMissing() {
	if !w.crdMissingLogged {
		w.crdMissingLogged = true
		w.logger.Error("the ProviderHealth CRD is not installed: apply it with `kubectl apply -f deploy/crd/`; metrics are still served and the writer keeps retrying",
			"crd", v1alpha1.Resource+"."+v1alpha1.GroupName)
	}
}

func (w *Writer) crdPresent() {
	if w.crdMissingLogged {
		w.crdMissingLogged = false
		w.logger.Info("the ProviderHealth CRD is installed now")
	}
}

// clash records that the object of a configured provider's name belongs to someone else: it is
// logged and recorded as an Event on that object when the clash starts, and counted in the
// name clashes metric while it lasts. The object is never written.
func (s *session) clash(obj *v1alpha1.ProviderHealth) {
	_, known := s.foreign[obj.Name]
	s.foreign[obj.Name] = time.Now()
	delete(s.live, obj.Name)
	s.w.metrics.nameClashes.Set(float64(len(s.foreign)))
	if known {
		return
	}
	owner := ownerOf(obj)
	if advice := s.adoptionAdvice(obj); advice != "" {
		// Made by an earlier build of the exporter (or by hand): no deployment can tell it is
		// its own, but it is nobody else's either. Say how to hand it over.
		s.w.logger.Warn("the ProviderHealth object of this provider's name carries no exporter deployment's identity (made by an older build of the exporter, or by hand); leaving it alone until it is adopted",
			"provider", obj.Name, "owner", owner, "adopt", advice, "instance", s.w.opts.Instance, "deployment", s.w.deployment)
		if s.mayWrite() {
			s.recorder.Event(obj, corev1.EventTypeWarning, ReasonNameClash, checks.Clip(fmt.Sprintf(
				"exporter instance %q (Lease %s) has a provider named %s and leaves this object alone: it belongs to %s (an older build of the exporter, or made by hand); to adopt it with its transition times: %s; or delete it and it is recreated",
				s.w.opts.Instance, s.w.deployment, obj.Name, owner, advice), maxEventMessage))
		}
		return
	}
	s.w.logger.Warn("the ProviderHealth object of this provider's name belongs to someone else; leaving it alone (rename one of the providers)",
		"provider", obj.Name, "owner", owner, "instance", s.w.opts.Instance, "deployment", s.w.deployment)
	if s.mayWrite() {
		s.recorder.Event(obj, corev1.EventTypeWarning, ReasonNameClash, checks.Clip(fmt.Sprintf(
			"exporter instance %q (Lease %s) also has a provider named %s and leaves this object alone: it belongs to %s; rename one of the providers",
			s.w.opts.Instance, s.w.deployment, obj.Name, owner), maxEventMessage))
	}
}

// adoptionAdvice returns the commands that give an object of ours (the managed-by label) without
// a deployment's identity (no deployment annotation, or no instance label: an older build's, or
// made by hand) this deployment's identity; empty for any other object.
func (s *session) adoptionAdvice(obj *v1alpha1.ProviderHealth) string {
	if obj.Labels[ManagedByLabel] != ManagedByValue {
		return ""
	}
	if _, ok := obj.Annotations[DeploymentAnnotation]; ok {
		if _, ok := obj.Labels[InstanceLabel]; ok {
			return "" // another deployment's
		}
	}
	return fmt.Sprintf("kubectl label ph %s %s=%s --overwrite && kubectl annotate ph %s %s=%s --overwrite",
		obj.Name, InstanceLabel, s.w.opts.Instance, obj.Name, DeploymentAnnotation, s.w.deployment)
}

// ownerOf describes who an object not of this deployment belongs to, for logs and Events.
func ownerOf(obj *v1alpha1.ProviderHealth) string {
	inst, hasInst := obj.Labels[InstanceLabel]
	dep, hasDep := obj.Annotations[DeploymentAnnotation]
	switch {
	case obj.Labels[ManagedByLabel] != ManagedByValue:
		return fmt.Sprintf("not managed by provider-health-exporter (%s=%q)", ManagedByLabel, obj.Labels[ManagedByLabel])
	case !hasInst:
		return fmt.Sprintf("no exporter deployment that can be told apart (no %s label)", InstanceLabel)
	case !hasDep:
		return fmt.Sprintf("exporter instance %q, of no deployment that can be told apart (no %s annotation)", inst, DeploymentAnnotation)
	default:
		return fmt.Sprintf("exporter instance %q of the deployment with the Lease %s", inst, dep)
	}
}

// configured returns the providers of the snapshot: the configured ones.
func configured(snap *checks.Snapshot) map[string]bool {
	set := make(map[string]bool, len(snap.Providers))
	for _, p := range snap.Providers {
		set[p.Name] = true
	}
	return set
}
