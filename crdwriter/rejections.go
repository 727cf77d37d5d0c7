package crdwriter

import (
	"encoding/json"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
)

// What the API server refuses or changes, and how the writer lives with it: an object it
// rejects (422), a CRD without the status subresource, and a CRD whose schema prunes fields the
// writer sets (an older CRD). Each is one provider's problem, or a problem of the CRD, reported
// once; none of them holds back the other providers' writes.

// rejection is a provider whose object the API server refused (422 Invalid).
type rejection struct {
	at time.Time
	// since is when the rejection started; err is the API server's newest answer.
	since time.Time
	err   string
	// status is the status refused; nil when the create was refused.
	status *v1alpha1.ProviderHealthStatus
}

// reject records that the API server refused the provider's object (status nil: its create) or
// its status: logged when the provider's rejection starts, counted in the rejected objects
// metric while it lasts. The same write is not tried again before a heartbeat interval has
// passed; a visibly different status is tried at once.
func (s *session) reject(name string, status *v1alpha1.ProviderHealthStatus, now time.Time, err error) {
	old, known := s.rejected[name]
	r := rejection{at: now, since: now, err: checks.Clip(err.Error(), maxInlineMessage)}
	if known {
		r.since = old.since
	}
	if status != nil {
		c := status.DeepCopy()
		r.status = c
	}
	s.rejected[name] = r
	s.w.metrics.rejected.Set(float64(len(s.rejected)))
	if !known {
		what := "its status"
		if status == nil {
			what = "the object"
		}
		s.w.logger.Error("the API server rejects this provider's ProviderHealth object; the other providers are written as usual, this one is tried again when its status changes or after the heartbeat interval",
			"provider", name, "rejected", what, "err", err)
	}
}

// accepted ends the provider's rejection, if any.
func (s *session) accepted(name string) {
	if _, ok := s.rejected[name]; ok {
		delete(s.rejected, name)
		s.w.metrics.rejected.Set(float64(len(s.rejected)))
		s.w.logger.Info("the API server accepts this provider's ProviderHealth object again", "provider", name)
	}
}

// holdBack reports whether the write of the provider's status (desired; nil: its create) is to
// wait: the CRD has no status subresource, or the API server refused this very write less than
// a heartbeat interval ago.
func (s *session) holdBack(name string, desired *v1alpha1.ProviderHealthStatus, now time.Time) bool {
	hb := s.w.opts.HeartbeatInterval
	if desired != nil && !s.noStatus.IsZero() && now.Sub(s.noStatus) < hb {
		return true
	}
	r, ok := s.rejected[name]
	if !ok || now.Sub(r.at) >= hb {
		return false
	}
	if desired == nil || r.status == nil {
		return desired == nil && r.status == nil
	}
	return sameVisible(r.status, desired)
}

// statusSubresourceMissing records that the CRD has no status subresource: PUT …/status answers
// 404 for an object that exists. Reported once; status writes wait a heartbeat interval, then
// one is tried again.
func (s *session) statusSubresourceMissing(now time.Time) {
	first := s.noStatus.IsZero()
	s.noStatus = now
	if first {
		s.w.metrics.crdMismatch.WithLabelValues(mismatchNoStatus).Set(1)
		s.w.logger.Error("the installed ProviderHealth CRD has no status subresource: no status can be written; apply the CRD of this release with `kubectl apply -f deploy/crd/` (one status write is tried again per heartbeat interval)",
			"crd", v1alpha1.Resource+"."+v1alpha1.GroupName, "retry_every", s.w.opts.HeartbeatInterval)
	}
}

func (s *session) statusSubresourceFound() {
	if !s.noStatus.IsZero() {
		s.noStatus = time.Time{}
		s.w.metrics.crdMismatch.WithLabelValues(mismatchNoStatus).Set(0)
		s.w.logger.Info("the ProviderHealth CRD has the status subresource now")
	}
}

// compareWithSent compares the status the API server stored (in updated) with the one sent.
// When they differ the installed CRD's schema lacks fields the writer sets (an older CRD: the
// API server prunes what its schema does not know), and the reply would never match what the
// writer wants, so it would write every round: the writer then remembers what it sent as the
// object's status, and reports the mismatch once per term.
func (s *session) compareWithSent(name string, sent *v1alpha1.ProviderHealthStatus, updated *v1alpha1.ProviderHealthStatus) {
	a, b := normalized(sent), normalized(updated)
	if equality.Semantic.DeepEqual(a, b) && equality.Semantic.DeepEqual(sent.LastHeartbeatTime, updated.LastHeartbeatTime) {
		return
	}
	fields := changedFields(sent, updated)
	*updated = *sent.DeepCopy()
	if !s.pruning {
		s.pruning = true
		s.w.metrics.crdMismatch.WithLabelValues(mismatchPruned).Set(1)
		s.w.logger.Error("the installed ProviderHealth CRD drops or changes status fields this writer sets (an older CRD?); apply the CRD of this release with `kubectl apply -f deploy/crd/`; until then the writer compares with what it sent",
			"provider", name, "fields", fields, "crd", v1alpha1.Resource+"."+v1alpha1.GroupName)
	}
}

// changedFields names the status fields (targets[].x and conditions[].x for those of the
// entries) whose JSON differs between sent and got.
func changedFields(sent, got *v1alpha1.ProviderHealthStatus) []string {
	var out []string
	diff := func(prefix string, a, b any) {
		am, bm := asJSONMap(a), asJSONMap(b)
		for k, v := range am {
			if !equality.Semantic.DeepEqual(v, bm[k]) {
				out = append(out, prefix+k)
			}
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				out = append(out, prefix+k)
			}
		}
	}
	top := func(st *v1alpha1.ProviderHealthStatus) v1alpha1.ProviderHealthStatus {
		c := *st.DeepCopy()
		c.Targets, c.Conditions = nil, nil
		return c
	}
	diff("", top(sent), top(got))
	if len(sent.Targets) > 0 && len(got.Targets) > 0 {
		diff("targets[].", sent.Targets[0], got.Targets[0])
	}
	if len(sent.Conditions) > 0 && len(got.Conditions) > 0 {
		diff("conditions[].", sent.Conditions[0], got.Conditions[0])
	}
	slices.Sort(out)
	return out
}

func asJSONMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	m := map[string]any{}
	_ = json.Unmarshal(b, &m)
	return m
}
