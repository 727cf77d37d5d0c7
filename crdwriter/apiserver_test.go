package crdwriter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kubernetes"
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// The namespace deploy/rbac/ puts the exporter's ServiceAccount and Lease in.
const exporterNamespace = "provider-health-exporter"

// kubeFixture is one real etcd + kube-apiserver with the CRD applied, shared by the subtests of
// TestAgainstAPIServer (they run one after the other and clean up after themselves).
type kubeFixture struct {
	env   *kube.Env
	admin *restObjects
	core  typedcorev1.CoreV1Interface
	coord coordinationv1client.CoordinationV1Interface
	root  string
}

func newKubeFixture(t *testing.T) *kubeFixture {
	env := kube.Start(t)
	f := &kubeFixture{env: env, root: testutil.RepoRoot(t)}
	env.ApplyCRDFile(t, filepath.Join(f.root, "deploy", "crd", "providerhealth.io_providerhealths.yaml"))
	hc, err := rest.HTTPClientFor(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if f.admin, err = newRESTObjects(env.AdminConfig, hc); err != nil {
		t.Fatal(err)
	}
	if f.core, err = typedcorev1.NewForConfigAndClient(env.AdminConfig, hc); err != nil {
		t.Fatal(err)
	}
	if f.coord, err = coordinationv1client.NewForConfigAndClient(env.AdminConfig, hc); err != nil {
		t.Fatal(err)
	}
	_, err = f.core.Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: exporterNamespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAgainstAPIServer runs the writer against a real API server (test/testenv/kube).
func TestAgainstAPIServer(t *testing.T) {
	f := newKubeFixture(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *kubeFixture)
	}{
		{"MissingCRD", testMissingCRD},
		{"KubectlColumnsAndDescribe", testKubectl},
		{"StatusSurvivesPruning", testPruning},
		{"SteadyStateFlipRestartReload", testSteadyState},
		{"HeartbeatAndRecreate", testHeartbeat},
		{"Staleness", testStaleness},
		{"GarbageCollectionAndDeleteAll", testGarbage},
		{"APIServerOutage", testOutage},
		{"LeaderElection", testLeaderElection},
		{"LeaderCrashFailover", testLeaderCrash},
		{"TwoInstances", testInstances},
		{"RBACIsEnoughAndNoMore", testRBAC},
		{"FenceExemptsOnlyTheLease", testFenceExemptsOnlyTheLease},
		{"NoStatusSubresource", testNoStatusSubresource},
		{"RejectedObject", testRejectedObject},
		{"PrunedFields", testPrunedFields},
		{"WritesBoundedByFence", testWritesBoundedByFence},
		{"ChecksOffRollout", testChecksOffRollout},
		{"TwoDefaultDeployments", testTwoDefaultDeployments},
		{"ListsInPages", testListsInPages},
		{"WriteVolumeAtScale", testWriteVolumeAtScale},
		{"NoBusyLoop", testNoBusyLoop},
		{"RestartBeforeFirstRound", testRestartBeforeFirstRound},
		{"BadObjectHoldsNothingBack", testBadObjectHoldsNothingBack},
		{"TwoWritersOneIdentity", testTwoWritersOneIdentity},
		{"OlderBuildObject", testOlderBuildObject},
		{"EventBudgetPerTarget", testEventBudgetPerTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.reset(t)
			tc.run(t, f)
		})
	}
}

// reset deletes every ProviderHealth object and the Lease.
func (f *kubeFixture) reset(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	items, err := f.admin.List(ctx, "")
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("list: %v", err)
	}
	for _, o := range items {
		if err := f.admin.Delete(ctx, o.Name, o.UID, ""); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete %s: %v", o.Name, err)
		}
	}
	err = f.coord.Leases(exporterNamespace).Delete(ctx, DefaultInstance, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete lease: %v", err)
	}
}

func (f *kubeFixture) get(t *testing.T, name string) *v1alpha1.ProviderHealth {
	t.Helper()
	o, err := f.admin.Get(context.Background(), name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return o
}

func (f *kubeFixture) put(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	_, err := f.admin.Create(context.Background(), &v1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// putOwned creates an object of the default deployment the fixture's harness runs as (the
// default instance, its Lease in exporterNamespace).
func (f *kubeFixture) putOwned(t *testing.T, name string) {
	t.Helper()
	if _, err := f.admin.Create(context.Background(), &v1alpha1.ProviderHealth{ObjectMeta: ownedBy(name, DefaultInstance, exporterNamespace+"/"+DefaultInstance)}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// events returns the Events about the object with uid.
func (f *kubeFixture) events(t *testing.T, uid string) []corev1.Event {
	t.Helper()
	list, err := f.core.Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", uid).String(),
	})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return list.Items
}

// requests counts the requests user made (per the audit log) that match.
func (f *kubeFixture) requests(t *testing.T, user string, match func(kube.AuditEvent) bool) int {
	t.Helper()
	return f.env.CountRequests(t, func(e kube.AuditEvent) bool { return e.User == user && (match == nil || match(e)) })
}

func isStatusUpdate(e kube.AuditEvent) bool {
	return e.Verb == "update" && e.Resource == v1alpha1.Resource && strings.Contains(e.RequestURI, "/status")
}

// isWrite matches every request that changes a ProviderHealth object or an Event.
func isWrite(e kube.AuditEvent) bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return e.Resource == v1alpha1.Resource || e.Resource == "events"
	}
	return false
}

func ptrString(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func isEventWrite(e kube.AuditEvent) bool {
	return e.Resource == "events" && (e.Verb == "create" || e.Verb == "patch")
}

func (f *kubeFixture) runKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kube.Kubectl(t, nil, append(kube.ClusterFlags(t, f.env.Kubeconfig), args...)...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// bodyRecorder keeps the bodies of the status writes a client sends.
type bodyRecorder struct {
	mu     sync.Mutex
	status map[string][]byte // by object name: the last status body sent
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (b *bodyRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status") && r.GetBody != nil {
			if body, err := r.GetBody(); err == nil {
				raw, _ := io.ReadAll(body)
				parts := strings.Split(r.URL.Path, "/")
				b.mu.Lock()
				b.status[parts[len(parts)-2]] = raw
				b.mu.Unlock()
			}
		}
		return rt.RoundTrip(r)
	})
}

// harness runs a Writer against the real API server as the user cfg authenticates.
func (f *kubeFixture) harness(t *testing.T, cfg *rest.Config, src *fakeSource, mod func(*Options)) *harness {
	t.Helper()
	return newHarness(t, cfg, nil, src, func(o *Options) {
		o.LeaseNamespace = exporterNamespace
		o.MaxRetryBackoff = time.Second
		if mod != nil {
			mod(o)
		}
	})
}

func (f *kubeFixture) userConfig(name string, groups ...string) *rest.Config {
	f.env.AddUser(name, groups...)
	return f.env.ConfigFor(name)
}

func testMissingCRD(t *testing.T, f *kubeFixture) {
	ctx := context.Background()
	crdPath := filepath.Join(f.root, "deploy", "crd", "providerhealth.io_providerhealths.yaml")
	// Remove the CRD, start the writer, then install the CRD.
	f.runKubectl(t, "delete", "-f", crdPath, "--wait=true")
	t.Cleanup(func() { f.env.ApplyCRDFile(t, crdPath) })
	eventually(t, "the CRD is gone", func() bool {
		_, err := f.admin.List(ctx, "")
		return apierrors.IsNotFound(err)
	})
	since := time.Now().Add(-time.Hour)
	p := provider("cluster-main", kubernetes.Type, target("api", checks.ReasonReady, "", since))
	h := f.harness(t, f.userConfig("writer-nocrd", "system:masters"), newFakeSource(p), nil)
	h.start()
	time.Sleep(3 * time.Second) // a few retries (the backoff is capped at 1s here)
	if n := strings.Count(h.logs.String(), "kubectl apply -f deploy/crd/"); n != 1 {
		t.Errorf("the missing CRD was logged %d times, want once; logs:\n%s", n, h.logs.String())
	}
	f.env.ApplyCRDFile(t, crdPath)
	eventually(t, "the object is written once the CRD exists", func() bool {
		o := f.get(t, "cluster-main")
		return o != nil && readyOf(o).Status == metav1.ConditionTrue
	})
}

func testKubectl(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour)
	downAt := time.Now().Add(-30 * time.Minute)
	providers := []checks.ProviderState{
		provider("cluster-main", kubernetes.Type, target("https://10.0.0.1:6443", checks.ReasonReady, "listed 12 pods", since)),
		provider("gcp-prod", gcp.Type, target("my-project", checks.ReasonForbidden, "permission compute.instances.list denied", downAt)),
		provider("kvm-lab", kvmcheck.Type,
			target("hv1", checks.ReasonReady, "pool default running", since),
			target("hv2", kvmcheck.ReasonTCPUnreachable, "dial tcp 198.18.0.12:22: connect: connection refused", downAt),
			target("hv3", kvmcheck.ReasonTCPUnreachable, "dial tcp 198.18.0.13:22: i/o timeout", downAt)),
	}
	src := newFakeSource()
	h := f.harness(t, f.userConfig("writer-kubectl", "system:masters"), src, nil)
	h.start()
	firstSeen := time.Now().Truncate(time.Second)
	h.round(providers...)
	written := time.Now()

	want := map[string][]string{ // NAME: READY REASON TARGETS, then wide TYPE MESSAGE
		"cluster-main": {"True", "AllTargetsReady", "1/1", "kubernetes", "the target is ready"},
		"gcp-prod":     {"False", "Forbidden", "0/1", "gcp", "1 of 1 targets down: my-project (Forbidden): permission compute.instances.list denied"},
		"kvm-lab":      {"False", "TCPUnreachable", "1/3", "kvm", "2 of 3 targets down (TCPUnreachable): hv2, hv3"},
	}
	out := f.runKubectl(t, "get", "ph")
	t.Logf("kubectl get ph:\n%s", out)
	rows := parseTable(t, out)
	if len(rows) != 3 {
		t.Fatalf("kubectl get ph listed %d rows, want 3: %v", len(rows), rows)
	}
	for _, r := range rows {
		w := want[r["NAME"]]
		if w == nil || r["READY"] != w[0] || r["REASON"] != w[1] || r["TARGETS"] != w[2] || !regexp.MustCompile(`^\d+s$`).MatchString(r["AGE"]) {
			t.Errorf("kubectl get ph row %v, want %v", r, w)
		}
		if _, ok := r["MESSAGE"]; ok {
			t.Errorf("kubectl get ph shows MESSAGE without -o wide")
		}
	}
	out = f.runKubectl(t, "get", "ph", "-o", "wide")
	t.Logf("kubectl get ph -o wide:\n%s", out)
	rows = parseTable(t, out)
	for _, r := range rows {
		w := want[r["NAME"]]
		if w == nil || r["READY"] != w[0] || r["TYPE"] != w[3] || r["MESSAGE"] != w[4] {
			t.Errorf("kubectl get ph -o wide row %v, want %v", r, w)
		}
	}
	// SINCE is the Ready condition's transition time. These providers are new to the writer:
	// their condition had no earlier status, so it starts when the writer first observed them
	// (setCondition), not at a target's older transition (half an hour or an hour ago), which
	// says nothing about the provider's status before.
	for _, r := range rows {
		name := r["NAME"]
		raw := strings.Trim(f.runKubectl(t, "get", "ph", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].lastTransitionTime}`), "'\n ")
		got, err := time.Parse(time.RFC3339, raw)
		if err != nil {
			t.Errorf("Ready lastTransitionTime of %s = %q: %v", name, raw, err)
			continue
		}
		if got.Before(firstSeen) || got.After(written) {
			t.Errorf("Ready lastTransitionTime of %s = %s, want the first observation, between %s and %s",
				name, got, firstSeen.Format(time.RFC3339), written.Format(time.RFC3339))
		}
		// kubectl shows it as an age: seconds, since it was set just now.
		if !regexp.MustCompile(`^\d+s$`).MatchString(r["SINCE"]) {
			t.Errorf("SINCE of %s = %q, want an age in seconds (set at %s)", name, r["SINCE"], got)
		}
	}

	// describe shows every target's verdict and the Events.
	eventually(t, "kubectl describe shows the Events", func() bool {
		out = f.runKubectl(t, "describe", "ph", "kvm-lab")
		return strings.Contains(out, "target hv2 is down (TCPUnreachable)") && strings.Contains(out, "target hv3 is down (TCPUnreachable)")
	})
	t.Logf("kubectl describe ph kvm-lab:\n%s", out)
	for _, s := range []string{"Targets:", "Name:  hv1", "Reason:  Ready", "Name:  hv2", "Reason:  TCPUnreachable",
		"connection refused", "Name:  hv3", "i/o timeout", "Warning  TCPUnreachable", "Events:"} {
		if !strings.Contains(squeeze(out), s) {
			t.Errorf("kubectl describe ph kvm-lab lacks %q:\n%s", s, out)
		}
	}
}

// squeeze collapses runs of spaces to two, so column padding does not matter.
func squeeze(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ") }

// parseTable splits kubectl's table output into rows keyed by header, cutting each line at the
// header's column starts (values may contain spaces, as MESSAGE does).
func parseTable(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	type col struct {
		name  string
		start int
	}
	var cols []col
	for _, m := range regexp.MustCompile(`\S+`).FindAllStringIndex(header, -1) {
		cols = append(cols, col{header[m[0]:m[1]], m[0]})
	}
	var rows []map[string]string
	for _, l := range lines[1:] {
		r := map[string]string{}
		for i, c := range cols {
			end := len(l)
			if i+1 < len(cols) {
				end = min(cols[i+1].start, len(l))
			}
			if c.start < len(l) {
				r[c.name] = strings.TrimSpace(l[c.start:end])
			}
		}
		rows = append(rows, r)
	}
	return rows
}

func testPruning(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour)
	var ts []checks.TargetState
	for i := range v1alpha1.MaxTargets + 44 {
		r, msg := checks.ReasonReady, fmt.Sprintf("pool default running on hv%03d", i)
		if i%100 == 7 {
			r, msg = kvmcheck.ReasonPoolInactive, strings.Repeat("é", 700) // clipped to 1024 bytes
		}
		ts = append(ts, target(fmt.Sprintf("hv%03d", i), r, msg, since))
	}
	rec := &bodyRecorder{status: map[string][]byte{}}
	cfg := f.userConfig("writer-pruning", "system:masters")
	cfg.WrapTransport = rec.wrap
	src := newFakeSource()
	h := f.harness(t, cfg, src, nil)
	h.start()
	h.round(provider("kvm-big", kvmcheck.Type, ts...))

	rec.mu.Lock()
	sent := rec.status["kvm-big"]
	rec.mu.Unlock()
	if sent == nil {
		t.Fatal("no status write recorded")
	}
	raw, err := f.admin.c.GetClient().Get().Resource(v1alpha1.Resource).Name("kvm-big").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sentObj, gotObj map[string]any
	if err := json.Unmarshal(sent, &sentObj); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &gotObj); err != nil {
		t.Fatal(err)
	}
	sentStatus, gotStatus := sentObj["status"].(map[string]any), gotObj["status"].(map[string]any)
	if diff := diffJSON("status", sentStatus, gotStatus); diff != "" {
		t.Errorf("the API server changed the status the writer sent (pruned or defaulted fields):\n%s", diff)
	}
	// Every field of the types is really there.
	for _, k := range []string{"conditions", "type", "readyTargets", "totalTargets", "targetsReady", "targets", "omittedTargets", "lastHeartbeatTime"} {
		if _, ok := gotStatus[k]; !ok {
			t.Errorf("status.%s missing after the write", k)
		}
	}
	tgt := gotStatus["targets"].([]any)
	if len(tgt) != v1alpha1.MaxTargets || gotStatus["omittedTargets"].(float64) != 44 {
		t.Errorf("%d targets, %v omitted; want %d and 44", len(tgt), gotStatus["omittedTargets"], v1alpha1.MaxTargets)
	}
	for _, k := range []string{"name", "up", "reason", "message", "lastTransitionTime"} {
		if _, ok := tgt[7].(map[string]any)[k]; !ok {
			t.Errorf("status.targets[7].%s missing", k)
		}
	}
	if msg := tgt[7].(map[string]any)["message"].(string); len(msg) > v1alpha1.MaxTargetMessageLength || !strings.HasSuffix(msg, "...") {
		t.Errorf("a long message was not clipped: %d bytes", len(msg))
	}
	// And therefore the next identical round writes nothing.
	rv := f.get(t, "kvm-big").ResourceVersion
	h.round(provider("kvm-big", kvmcheck.Type, ts...))
	if got := f.get(t, "kvm-big").ResourceVersion; got != rv {
		t.Errorf("an identical round wrote the object again (resource version %s -> %s)", rv, got)
	}
}

// diffJSON lists the differences between two decoded JSON values.
func diffJSON(path string, a, b any) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: %T vs %T\n", path, a, b)
		}
		var out strings.Builder
		for k := range av {
			out.WriteString(diffJSON(path+"."+k, av[k], bv[k]))
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				fmt.Fprintf(&out, "%s.%s: added %v\n", path, k, bv[k])
			}
		}
		return out.String()
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return fmt.Sprintf("%s: %d items sent, %v read back\n", path, len(av), b)
		}
		var out strings.Builder
		for i := range av {
			out.WriteString(diffJSON(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]))
		}
		return out.String()
	default:
		if a != b {
			return fmt.Sprintf("%s: sent %v, read back %v\n", path, a, b)
		}
		return ""
	}
}

func testSteadyState(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour).Truncate(time.Second)
	p := func(hv2 checks.Reason, at time.Time) checks.ProviderState {
		return provider("kvm-lab", kvmcheck.Type, target("hv1", checks.ReasonReady, "ok", since), target("hv2", hv2, "ok or not", at))
	}
	const user = "writer-steady"
	src := newFakeSource()
	h := f.harness(t, f.userConfig(user, "system:masters"), src, nil)
	h.start()
	h.round(p(checks.ReasonReady, since))
	rv := f.get(t, "kvm-lab").ResourceVersion
	before := f.requests(t, user, nil)
	for range 5 {
		h.round(p(checks.ReasonReady, since))
	}
	if n := f.requests(t, user, nil) - before; n != 0 {
		t.Errorf("5 rounds without a change made %d requests, want 0", n)
	}
	if got := f.get(t, "kvm-lab").ResourceVersion; got != rv {
		t.Errorf("resource version moved %s -> %s without a change", rv, got)
	}

	// One flip: exactly one status write and one Event.
	flip := time.Now().Truncate(time.Second)
	statusBefore := f.requests(t, user, isStatusUpdate)
	eventsBefore := f.requests(t, user, isEventWrite)
	h.round(p(kvmcheck.ReasonSSHAuthFailed, flip))
	h.round(p(kvmcheck.ReasonSSHAuthFailed, flip))
	obj := f.get(t, "kvm-lab")
	eventually(t, "the Event is written", func() bool { return len(f.events(t, string(obj.UID))) == 1 })
	time.Sleep(500 * time.Millisecond) // room for a second, wrong Event to show up
	if n := f.requests(t, user, isStatusUpdate) - statusBefore; n != 1 {
		t.Errorf("%d status writes for one flip, want 1", n)
	}
	if n := f.requests(t, user, isEventWrite) - eventsBefore; n != 1 {
		t.Errorf("%d Event writes for one flip, want 1", n)
	}
	ev := f.events(t, string(obj.UID))
	if len(ev) != 1 || ev[0].Type != corev1.EventTypeWarning || ev[0].Reason != "SSHAuthFailed" || ev[0].Source.Component != FieldManager {
		t.Errorf("events = %+v", ev)
	}
	if got := obj.Status.Targets[1].LastTransitionTime.Time; !got.Equal(flip) {
		t.Errorf("hv2 since %s, want %s", got, flip)
	}
	if got := obj.Status.Targets[0].LastTransitionTime.Time; !got.Equal(since) {
		t.Errorf("hv1 since %s, want %s (it did not flip)", got, since)
	}
	condSince := readyOf(obj).LastTransitionTime
	h.stop()

	// Restart: a new writer (another process) reads the times back and writes nothing.
	const user2 = "writer-steady-2"
	src2 := newFakeSource(provider("kvm-lab", kvmcheck.Type))
	h2 := f.harness(t, f.userConfig(user2, "system:masters"), src2, nil)
	h2.start()
	h2.round(provider("kvm-lab", kvmcheck.Type)) // round 0 of the new runner: no targets yet
	now := time.Now()
	h2.round(p(kvmcheck.ReasonSSHAuthFailed, now)) // the new runner's Since is its own first check
	// A reload that keeps the provider: the runner publishes the same providers again.
	h2.round(p(kvmcheck.ReasonSSHAuthFailed, now))
	if n := f.requests(t, user2, func(e kube.AuditEvent) bool { return e.Verb != "list" }); n != 0 {
		t.Errorf("a restart and a reload without a change made %d requests besides lists", n)
	}
	obj2 := f.get(t, "kvm-lab")
	if obj2.ResourceVersion != obj.ResourceVersion {
		t.Errorf("the object was written after the restart")
	}
	if got := obj2.Status.Targets[1].LastTransitionTime.Time; !got.Equal(flip) {
		t.Errorf("hv2 since %s after a restart, want %s", got, flip)
	}
	if got := readyOf(obj2).LastTransitionTime; !got.Equal(&condSince) {
		t.Errorf("Ready since %s after a restart, want %s", got, condSince)
	}
}

func testHeartbeat(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour)
	const user = "writer-heartbeat"
	src := newFakeSource()
	h := f.harness(t, f.userConfig(user, "system:masters"), src, func(o *Options) { o.HeartbeatInterval = 2 * time.Second })
	h.start()
	h.round(provider("gcp-prod", gcp.Type, target("my-project", checks.ReasonReady, "", since)))
	first := f.get(t, "gcp-prod")

	// No round, no change: the heartbeat alone is written, nothing else moves.
	eventually(t, "a heartbeat", func() bool {
		return f.get(t, "gcp-prod").Status.LastHeartbeatTime.After(first.Status.LastHeartbeatTime.Time)
	})
	beat := f.get(t, "gcp-prod")
	if !sameVisible(&first.Status, &beat.Status) {
		t.Errorf("the heartbeat changed the status:\n%+v\n%+v", first.Status, beat.Status)
	}
	if got := beat.Status.LastHeartbeatTime.Sub(first.Status.LastHeartbeatTime.Time); got < 2*time.Second {
		t.Errorf("heartbeats %s apart, want at least the interval", got)
	}

	// Deleted by someone and no change since: the next heartbeat recreates it, with its times.
	if err := f.admin.Delete(context.Background(), "gcp-prod", beat.UID, ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the object is recreated", func() bool {
		o := f.get(t, "gcp-prod")
		return o != nil && len(o.Status.Conditions) == 1
	})
	again := f.get(t, "gcp-prod")
	if again.UID == beat.UID || !sameVisible(&again.Status, &beat.Status) {
		t.Errorf("recreated object %s differs:\n%+v\n%+v", again.UID, beat.Status, again.Status)
	}
}

func testStaleness(t *testing.T, f *kubeFixture) {
	src := newFakeSource()
	h := f.harness(t, f.userConfig("writer-stale", "system:masters"), src, func(o *Options) { o.StaleAfter = 2 * time.Second })
	h.start()
	h.round(provider("cluster-main", kubernetes.Type, target("api", checks.ReasonReady, "", time.Now().Add(-time.Hour))))
	// The runner stops producing rounds: the writer turns Ready Unknown by itself.
	eventually(t, "Ready turns Unknown", func() bool { return readyOf(f.get(t, "cluster-main")).Status == metav1.ConditionUnknown })
	rows := parseTable(t, f.runKubectl(t, "get", "ph", "cluster-main"))
	if len(rows) != 1 || rows[0]["READY"] != "Unknown" || rows[0]["REASON"] != v1alpha1.ReasonChecksStale || rows[0]["TARGETS"] != "1/1" {
		t.Errorf("kubectl get ph of a stale provider: %v", rows)
	}
	// Fresh results again: True.
	h.round(provider("cluster-main", kubernetes.Type, target("api", checks.ReasonReady, "", time.Now().Add(-time.Hour))))
	if c := readyOf(f.get(t, "cluster-main")); c.Status != metav1.ConditionTrue {
		t.Errorf("fresh results after staleness: %+v", c)
	}
}

func testGarbage(t *testing.T, f *kubeFixture) {
	f.putOwned(t, "removed-provider")
	f.put(t, "not-ours", nil)
	f.put(t, "other-manager", map[string]string{ManagedByLabel: "helm"})
	since := time.Now().Add(-time.Hour)
	a := provider("a", gcp.Type, target("p", checks.ReasonReady, "", since))
	b := provider("b", gcp.Type, target("p", checks.ReasonReady, "", since))
	src := newFakeSource(a, b)
	h := f.harness(t, f.userConfig("writer-gc", "system:masters"), src, nil)
	h.start()
	h.round(a, b)
	if f.get(t, "removed-provider") != nil {
		t.Error("our object of an unconfigured provider survived the start")
	}
	if f.get(t, "a") == nil || f.get(t, "b") == nil {
		t.Error("configured providers have no object")
	}
	h.round(a) // a reload removed b: the runner publishes a snapshot without it
	if f.get(t, "b") != nil {
		t.Error("b survived the reload that removed it")
	}
	if f.get(t, "a") == nil {
		t.Error("the reload deleted a")
	}
	h.stop()
	if err := h.w.DeleteAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.get(t, "a") != nil {
		t.Error("DeleteAll left one of ours")
	}
	if f.get(t, "not-ours") == nil || f.get(t, "other-manager") == nil {
		t.Error("an object without our label was deleted")
	}
}

func testOutage(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour).Truncate(time.Second)
	p := func(r checks.Reason, at time.Time) checks.ProviderState {
		return provider("cluster-main", kubernetes.Type, target("api", r, "", at))
	}
	src := newFakeSource()
	h := f.harness(t, f.userConfig("writer-outage", "system:masters"), src, nil)
	h.start()
	h.round(p(checks.ReasonReady, since))
	uid := string(f.get(t, "cluster-main").UID)

	if err := f.env.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = f.env.Restart()
		}
	})
	down := time.Now().Truncate(time.Second)
	src.publish(p(checks.ReasonAPIError, down))
	eventually(t, "the writer fails to write", func() bool { return h.writes(writeStatus, resultError) >= 2 })
	// The runner is never blocked: more rounds come while the API server is away.
	for range 3 {
		src.publish(p(checks.ReasonAPIError, down))
	}
	if err := f.env.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, "the writer catches up", func() bool {
		o := f.get(t, "cluster-main")
		return o != nil && readyOf(o).Reason == "APIError"
	})
	o := f.get(t, "cluster-main")
	if got := o.Status.Targets[0].LastTransitionTime.Time; !got.Equal(down) {
		t.Errorf("transition time %s after the outage, want %s", got, down)
	}
	eventually(t, "the down Event is written", func() bool {
		for _, e := range f.events(t, uid) {
			if e.Reason == "APIError" {
				return true
			}
		}
		return false
	})
	// Still writing afterwards.
	h.round(p(checks.ReasonReady, time.Now()))
	if c := readyOf(f.get(t, "cluster-main")); c.Status != metav1.ConditionTrue {
		t.Errorf("after the outage the writer does not write: %+v", c)
	}
}

func testLeaderElection(t *testing.T, f *kubeFixture) {
	since := time.Now().Add(-time.Hour)
	p := func(r checks.Reason) checks.ProviderState {
		return provider("cluster-main", kubernetes.Type, target("api", r, "", time.Now()))
	}
	const leaseDuration = 4 * time.Second
	le := func(id string) func(*Options) {
		return func(o *Options) {
			o.LeaderElect, o.Identity = true, id
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = leaseDuration, 3*time.Second, 500*time.Millisecond
			o.HolderPod = &PodRef{Namespace: exporterNamespace, Name: "pod-" + id, UID: "uid-" + id}
		}
	}
	// The holder's pod owns the Lease, so that the garbage collector deletes it with the
	// holder's pod (helm uninstall refuses the holder's own release: its Role is gone first).
	ownedBy := func(id string) func() bool {
		return func() bool {
			lease, err := f.coord.Leases(exporterNamespace).Get(context.Background(), DefaultInstance, metav1.GetOptions{})
			if err != nil {
				return false
			}
			want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod-" + id, UID: types.UID("uid-" + id)}}
			return *lease.Spec.HolderIdentity == id && reflect.DeepEqual(lease.OwnerReferences, want)
		}
	}
	srcA, srcB := newFakeSource(), newFakeSource()
	a := f.harness(t, f.userConfig("writer-a", "system:masters"), srcA, le("a"))
	b := f.harness(t, f.userConfig("writer-b", "system:masters"), srcB, le("b"))
	a.start()
	eventually(t, "a leads", func() bool { return a.metric("crd_writer_leader") == 1 })
	eventually(t, "a's pod owns the Lease", ownedBy("a"))
	b.start()
	publish := func(ps checks.ProviderState) {
		srcA.publish(ps)
		srcB.publish(ps)
	}
	publish(provider("cluster-main", kubernetes.Type, target("api", checks.ReasonReady, "", since)))
	eventually(t, "the leader writes", func() bool { o := f.get(t, "cluster-main"); return o != nil && len(o.Status.Targets) == 1 })
	publish(p(checks.ReasonForbidden))
	eventually(t, "the leader writes the change", func() bool { return readyOf(f.get(t, "cluster-main")).Reason == "Forbidden" })
	time.Sleep(time.Second)
	if n := f.requests(t, "writer-b", func(e kube.AuditEvent) bool { return e.Resource == v1alpha1.Resource || e.Resource == "events" }); n != 0 {
		t.Errorf("the follower made %d requests about ProviderHealth objects or Events", n)
	}
	if b.metric("crd_writer_leader") != 0 {
		t.Error("the follower says it leads")
	}

	// Stop the leader: the follower takes over within the lease duration.
	stopped := time.Now()
	a.stop()
	eventually(t, "b leads", func() bool { return b.metric("crd_writer_leader") == 1 })
	eventually(t, "the owner moved with the holder: b's pod owns the Lease", ownedBy("b"))
	if took := time.Since(stopped); took > leaseDuration {
		t.Errorf("the follower took over after %s, more than the lease duration %s", took, leaseDuration)
	}
	publish(p(checks.ReasonUnauthorized))
	eventually(t, "the new leader writes", func() bool { return readyOf(f.get(t, "cluster-main")).Reason == "Unauthorized" })

	// Someone else takes the lease: from the moment b's elector observes it, b makes no write
	// (client-go itself would keep renewing, and b leading, until the renew deadline), and it
	// campaigns again. Nothing of b's is in flight: its Event is written, the status too.
	uid := string(f.get(t, "cluster-main").UID)
	eventually(t, "b's Event is written", func() bool {
		for _, e := range f.events(t, uid) {
			if e.Reason == "Unauthorized" {
				return true
			}
		}
		return false
	})
	lease, err := f.coord.Leases(exporterNamespace).Get(context.Background(), DefaultInstance, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	thief, dur := "thief", int32(3)
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &thief, &dur
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := f.coord.Leases(exporterNamespace).Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's elector observes the thief and b stops leading", func() bool { return b.metric("crd_writer_leader") == 0 })
	writesBefore := f.requests(t, "writer-b", isWrite)
	// A change that a leader would write at once, as a status and an Event.
	srcB.publish(p(checks.ReasonTimeout))
	time.Sleep(500 * time.Millisecond) // room for a write that should not come
	if n := f.requests(t, "writer-b", isWrite) - writesBefore; n != 0 {
		t.Errorf("b made %d writes after it had observed another holder of the lease", n)
	}
	eventually(t, "b leads again once the thief's lease expired", func() bool { return b.metric("crd_writer_leader") == 1 })
	eventually(t, "b writes again", func() bool { return readyOf(f.get(t, "cluster-main")).Reason == "Timeout" })
	if !strings.Contains(b.logs.String(), "lost the lease") {
		t.Error("losing the lease was not logged")
	}
}

// testLeaderCrash kills the leader without letting it hand the lease back (its every request
// fails, as when the process or its node dies): the follower takes over once the lease expires,
// never before, and within client-go's bound after the leader's last renewal.
func testLeaderCrash(t *testing.T, f *kubeFixture) {
	// No bound under 2s: a renewal on a loaded machine must not lose the lease before the
	// crash (client-go wants leaseDuration > renewDeadline > JitterFactor × retryPeriod).
	const (
		leaseDuration = 4 * time.Second
		renewDeadline = 3 * time.Second
		retryPeriod   = 2 * time.Second
	)
	// c tries every retry period, jittered by up to JitterFactor more. It takes the lease once
	// the lease duration has passed since it observed the last renewal, which it does at its
	// first attempt after the renewal, and acquires at its first attempt after the expiry: at
	// worst two jittered retry periods after lastRenewal + leaseDuration.
	maxTook := leaseDuration + time.Duration(2*(1+leaderelection.JitterFactor)*float64(retryPeriod))
	le := func(id string) func(*Options) {
		return func(o *Options) {
			o.LeaderElect, o.Identity = true, id
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = leaseDuration, renewDeadline, retryPeriod
		}
	}
	var dead atomic.Bool
	cfgA := f.userConfig("writer-crash-a", "system:masters")
	cfgA.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if dead.Load() {
				return nil, errors.New("the leader's process is gone")
			}
			return rt.RoundTrip(r)
		})
	}
	srcA, srcC := newFakeSource(), newFakeSource()
	a := f.harness(t, cfgA, srcA, le("crash-a"))
	c := f.harness(t, f.userConfig("writer-crash-c", "system:masters"), srcC, le("crash-c"))
	a.start()
	eventually(t, "a leads", func() bool { return a.metric("crd_writer_leader") == 1 })
	c.start()
	publish := func(ps checks.ProviderState) {
		srcA.publish(ps)
		srcC.publish(ps)
	}
	publish(provider("cluster-main", kubernetes.Type, target("api", checks.ReasonReady, "", time.Now())))
	eventually(t, "a writes", func() bool { o := f.get(t, "cluster-main"); return o != nil && len(o.Status.Targets) == 1 })
	// Let a renew a few times, so that c has seen renewals and not only the first acquire.
	time.Sleep(3 * retryPeriod)

	// The crash: nothing of a's reaches the API server any more, so stopping it cannot release
	// the lease.
	dead.Store(true)
	a.stop()
	lease, err := f.coord.Leases(exporterNamespace).Get(context.Background(), DefaultInstance, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "crash-a" || lease.Spec.RenewTime == nil {
		t.Fatalf("after the crash the lease says holder %q, want crash-a (not released)", ptrString(h))
	}
	lastRenewal := lease.Spec.RenewTime.Time
	publish(provider("cluster-main", kubernetes.Type, target("api", checks.ReasonForbidden, "", time.Now())))

	var ledAt time.Time
	testutil.Eventually(t, maxTook+10*time.Second, "c leads", func() bool {
		ledAt = time.Now()
		return c.metric("crd_writer_leader") == 1
	})
	eventually(t, "c writes the change", func() bool { return readyOf(f.get(t, "cluster-main")).Reason == "Forbidden" })
	wroteAt := time.Now()
	// c leads at most maxTook after the last renewal, and never before the renewal's second +
	// leaseDuration: client-go compares the records it reads at one-second precision, so a
	// renewal in the second of the previous one looks to c like no renewal.
	took := ledAt.Sub(lastRenewal)
	minTook := lastRenewal.Truncate(time.Second).Add(leaseDuration).Sub(lastRenewal)
	t.Logf("c led %s after a's last renewal (lease %s, retry %s), wrote %s later", took, leaseDuration, retryPeriod, wroteAt.Sub(ledAt))
	if took < minTook {
		t.Errorf("c led %s after a's last renewal, before the lease (%s) expired (at %s): was the lease released?", took, leaseDuration, minTook)
	}
	if took > maxTook {
		t.Errorf("c led %s after a's last renewal, want at most %s", took, maxTook)
	}
	// The first write of a term is a list and a status write: two seconds are plenty.
	if wrote := wroteAt.Sub(lastRenewal); wrote > maxTook+2*time.Second {
		t.Errorf("c wrote %s after a's last renewal, want at most %s", wrote, maxTook+2*time.Second)
	}
}

// testRBAC applies deploy/rbac/ and runs the writer as the ServiceAccount the Deployment of
// deploy/ runs as (a token user of the same name), with the Lease name the Deployment's flags
// give: every operation works and nothing is forbidden. Then, for each verb of each rule, the
// same run with that verb removed gets a 403: no verb is granted without a use.
func testRBAC(t *testing.T, f *kubeFixture) {
	rbacDir := filepath.Join(f.root, "deploy", "rbac")
	namespace, account := deploymentIdentity(t, f.root)
	if namespace != exporterNamespace {
		t.Fatalf("deploy/deployment.yaml runs in namespace %q, deploy/rbac/ grants the Lease in %q", namespace, exporterNamespace)
	}
	sa := "system:serviceaccount:" + namespace + ":" + account
	cfg := f.userConfig(sa, "system:serviceaccounts", "system:serviceaccounts:"+namespace)
	forbidden := func() int {
		return f.requests(t, sa, func(e kube.AuditEvent) bool { return e.Code == http.StatusForbidden })
	}

	f.runKubectl(t, "apply", "-k", rbacDir)
	if !f.rbacScenario(t, cfg, nil) {
		t.Fatal("the writer did not complete its work with the deploy/rbac/ role")
	}
	if n := forbidden(); n != 0 {
		t.Fatalf("%d requests were forbidden with the deploy/rbac/ role", n)
	}

	docs := readYAMLDocs(t, rbacDir)
	type removal struct{ file, resource, verb string }
	var removals []removal
	for file, objs := range docs {
		for _, o := range objs {
			if o["kind"] != "Role" && o["kind"] != "ClusterRole" {
				continue
			}
			for _, r := range o["rules"].([]any) {
				rule := r.(map[string]any)
				for _, v := range rule["verbs"].([]any) {
					removals = append(removals, removal{file, fmt.Sprint(rule["resources"]), v.(string)})
				}
			}
		}
	}
	if len(removals) < 10 {
		t.Fatalf("found %d verbs in deploy/rbac/, want at least 10", len(removals))
	}
	for _, rm := range removals {
		t.Run(fmt.Sprintf("without %s %s", rm.verb, strings.Trim(rm.resource, "[]")), func(t *testing.T) {
			f.reset(t)
			dir := t.TempDir()
			for file, objs := range docs {
				var out bytes.Buffer
				for _, o := range objs {
					o = deepCopyJSON(o)
					if file == rm.file && (o["kind"] == "Role" || o["kind"] == "ClusterRole") {
						var rules []any
						for _, r := range o["rules"].([]any) {
							rule := r.(map[string]any)
							if fmt.Sprint(rule["resources"]) == rm.resource {
								rule["verbs"] = slices.DeleteFunc(rule["verbs"].([]any), func(v any) bool { return v == rm.verb })
							}
							if len(rule["verbs"].([]any)) > 0 { // a rule without verbs is invalid
								rules = append(rules, rule)
							}
						}
						o["rules"] = rules
					}
					b, err := yaml.Marshal(o)
					if err != nil {
						t.Fatal(err)
					}
					out.WriteString("---\n")
					out.Write(b)
				}
				if err := os.WriteFile(filepath.Join(dir, file), out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f.runKubectl(t, "apply", "-f", dir)
			t.Cleanup(func() { f.runKubectl(t, "apply", "-k", rbacDir) })
			before := forbidden()
			f.rbacScenario(t, cfg, func() bool { return forbidden() > before })
			if forbidden() == before {
				t.Errorf("without %s on %s nothing was forbidden: the verb is not needed", rm.verb, rm.resource)
			}
		})
	}
}

// deploymentIdentity reads deploy/deployment.yaml: the namespace and ServiceAccount its pods
// run as. Its flags must leave the Lease name at the default the scenario uses.
func deploymentIdentity(t *testing.T, root string) (namespace, serviceAccount string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &dep); err != nil {
		t.Fatalf("deploy/deployment.yaml: %v", err)
	}
	if dep.Spec.Template.Spec.ServiceAccountName == "" || len(dep.Spec.Template.Spec.Containers) == 0 {
		t.Fatal("deploy/deployment.yaml names no ServiceAccount or container")
	}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--crd.lease-name") || strings.HasPrefix(a, "--crd.lease-namespace") {
			t.Fatalf("deploy/deployment.yaml sets %s: run the RBAC scenario with that Lease", a)
		}
	}
	return dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName
}

// rbacScenario exercises every kind of request the writer makes: list and delete (garbage),
// create and get (a provider whose name is taken by a foreign object), status updates, Event
// creates and patches (a repeated transition), Lease get, create and update (leader election,
// renewals). It returns whether all of it was done; stop ends it early.
func (f *kubeFixture) rbacScenario(t *testing.T, cfg *rest.Config, stop func() bool) bool {
	f.putOwned(t, "garbage")
	f.put(t, "foreign", nil)
	p := func(r checks.Reason) []checks.ProviderState {
		return []checks.ProviderState{
			provider("p", kvmcheck.Type, target("hv1", r, "dial tcp 198.18.0.1:22: connection refused", time.Now())),
			provider("foreign", kvmcheck.Type, target("hv1", checks.ReasonReady, "", time.Now())),
		}
	}
	src := newFakeSource(p(kvmcheck.ReasonTCPUnreachable)...)
	h := f.harness(t, cfg, src, func(o *Options) {
		o.LeaderElect, o.Identity = true, "rbac"
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	})
	h.start()
	defer h.stop()
	deadline := time.Now().Add(30 * time.Second)
	wait := func(cond func() bool) bool {
		for !cond() {
			if time.Now().After(deadline) || (stop != nil && stop()) {
				return false
			}
			time.Sleep(100 * time.Millisecond)
		}
		return true
	}
	var obj *v1alpha1.ProviderHealth
	if !wait(func() bool {
		obj = f.get(t, "p")
		return f.get(t, "garbage") == nil && obj != nil && len(obj.Status.Targets) == 1 && !obj.Status.Targets[0].Up
	}) {
		return false
	}
	src.publish(p(checks.ReasonReady)...)
	if !wait(func() bool { return len(f.events(t, string(obj.UID))) >= 2 }) {
		return false
	}
	src.publish(p(kvmcheck.ReasonTCPUnreachable)...) // the same down Event again: a patch
	if !wait(func() bool {
		for _, e := range f.events(t, string(obj.UID)) {
			if e.Count >= 2 {
				return true
			}
		}
		return false
	}) {
		return false
	}
	lease, err := f.coord.Leases(exporterNamespace).Get(context.Background(), DefaultInstance, metav1.GetOptions{})
	if err != nil {
		return false
	}
	first := lease.Spec.RenewTime.Time
	return wait(func() bool {
		l, err := f.coord.Leases(exporterNamespace).Get(context.Background(), DefaultInstance, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(first)
	}) && f.get(t, "foreign").Labels[ManagedByLabel] == ""
}

// readYAMLDocs decodes every YAML file of dir (not the kustomization) into JSON objects.
func readYAMLDocs(t *testing.T, dir string) map[string][]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	for _, path := range files {
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if o != nil {
				out[filepath.Base(path)] = append(out[filepath.Base(path)], o)
			}
		}
	}
	return out
}

func deepCopyJSON(o map[string]any) map[string]any {
	b, _ := json.Marshal(o)
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}

// testInstances runs two exporter instances against one API server: team-a with two replicas
// sharing its objects through leader election, team-b with one. Each keeps to its own objects
// through restarts and checks-off runs, and a provider name both configure is a reported clash.
func testInstances(t *testing.T, f *kubeFixture) {
	t.Cleanup(func() {
		for _, lease := range []string{"team-a", "team-b"} {
			_ = f.coord.Leases(exporterNamespace).Delete(context.Background(), lease, metav1.DeleteOptions{})
		}
	})
	since := time.Now().Add(-time.Hour)
	ph := func(name string, r checks.Reason) checks.ProviderState {
		return provider(name, gcp.Type, target("p", r, "", since))
	}
	inst := func(instance, id string) func(*Options) {
		return func(o *Options) {
			o.Instance, o.Identity = instance, id
			o.LeaderElect = true
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
		}
	}
	srcA1, srcA2, srcB := newFakeSource(), newFakeSource(), newFakeSource()
	a1 := f.harness(t, f.userConfig("writer-team-a-1", "system:masters"), srcA1, inst("team-a", "a1"))
	a2 := f.harness(t, f.userConfig("writer-team-a-2", "system:masters"), srcA2, inst("team-a", "a2"))
	b := f.harness(t, f.userConfig("writer-team-b", "system:masters"), srcB, inst("team-b", "b"))
	a1.start()
	eventually(t, "a1 leads team-a", func() bool { return a1.metric("crd_writer_leader") == 1 })
	a2.start()
	b.start()
	eventually(t, "b leads team-b (its own Lease)", func() bool { return b.metric("crd_writer_leader") == 1 })
	if a2.metric("crd_writer_leader") != 0 {
		t.Error("both replicas of team-a lead")
	}
	aProviders := []checks.ProviderState{ph("a-only", checks.ReasonReady), ph("shared", checks.ReasonReady)}
	srcA1.publish(aProviders...)
	srcA2.publish(aProviders...)
	eventually(t, "team-a's objects are written", func() bool {
		o := f.get(t, "shared")
		return f.get(t, "a-only") != nil && o != nil && len(o.Status.Conditions) == 1
	})
	sharedBefore := f.get(t, "shared")
	if sharedBefore.Labels[InstanceLabel] != "team-a" || f.get(t, "a-only").Labels[InstanceLabel] != "team-a" {
		t.Errorf("team-a's objects lack the instance label: %v", sharedBefore.Labels)
	}
	b.round(ph("b-only", checks.ReasonForbidden), ph("shared", checks.ReasonForbidden))
	if o := f.get(t, "b-only"); o == nil || o.Labels[InstanceLabel] != "team-b" || readyOf(o).Reason != "Forbidden" {
		t.Errorf("team-b's object: %+v", o)
	}
	eventually(t, "team-b reports the clash", func() bool { return b.metric("crd_writer_name_clashes") == 1 })
	eventually(t, "the NameClash Event", func() bool {
		for _, e := range f.events(t, string(sharedBefore.UID)) {
			if e.Reason == ReasonNameClash && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, `belongs to exporter instance "team-a"`) {
				return true
			}
		}
		return false
	})
	if !strings.Contains(b.logs.String(), "belongs to someone else") {
		t.Error("the clash was not logged")
	}
	if o := f.get(t, "shared"); o.ResourceVersion != sharedBefore.ResourceVersion || readyOf(o).Reason != v1alpha1.ReasonAllTargetsReady {
		t.Errorf("team-b wrote team-a's object: %+v", o.Status)
	}
	if n := f.requests(t, "writer-team-b", func(e kube.AuditEvent) bool {
		return e.Resource == v1alpha1.Resource && e.Name == "shared" && e.Verb != "get" && e.Code < 300
	}); n != 0 {
		t.Errorf("team-b made %d successful writes to team-a's object", n)
	}

	// team-b restarts without any of its providers: its own object goes, team-a's stay.
	b.stop()
	b2 := f.harness(t, f.userConfig("writer-team-b", "system:masters"), newFakeSource(), inst("team-b", "b2"))
	b2.start()
	b2.round()
	eventually(t, "team-b's b-only is collected", func() bool { return f.get(t, "b-only") == nil })
	if f.get(t, "a-only") == nil || f.get(t, "shared") == nil {
		t.Error("team-b's restart deleted team-a's objects")
	}
	b2.stop()
	// team-b with checks off deletes only its own.
	if err := b2.w.DeleteAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.get(t, "a-only") == nil || f.get(t, "shared") == nil {
		t.Error("team-b's checks-off run deleted team-a's objects")
	}

	// team-a's leader goes: its other replica takes over the same objects (no new object, no
	// clash), and writes them.
	a1.stop()
	eventually(t, "a2 leads team-a", func() bool { return a2.metric("crd_writer_leader") == 1 })
	srcA2.publish(ph("a-only", checks.ReasonForbidden), ph("shared", checks.ReasonReady))
	eventually(t, "a2 writes team-a's object", func() bool { return readyOf(f.get(t, "a-only")).Reason == "Forbidden" })
	if o := f.get(t, "shared"); o.UID != sharedBefore.UID {
		t.Error("team-a's object was replaced after the change of leader")
	}
	if a2.metric("crd_writer_name_clashes") != 0 {
		t.Error("a replica of team-a sees a clash with its own instance's objects")
	}
	// team-a with checks off deletes its own, and not an object of another instance.
	f.put(t, "b-again", map[string]string{ManagedByLabel: ManagedByValue, InstanceLabel: "team-b"})
	a2.stop()
	if err := a2.w.DeleteAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.get(t, "a-only") != nil || f.get(t, "shared") != nil || f.get(t, "b-again") == nil {
		t.Error("team-a's checks-off run did not delete exactly its own objects")
	}
}
