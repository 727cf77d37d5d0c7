package e2e

import (
	"context"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/provider-health-exporter/provider-health-exporter/crdwriter/v1alpha1"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

var phResource = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.SchemeGroupVersion.Version, Resource: v1alpha1.Resource}

// startSubprocessExporter runs the exporter binary with args, and returns it once it serves
// HTTP, with its process, which the test stops, freezes or signals itself.
func startSubprocessExporter(t *testing.T, args ...string) (*testExporter, *testutil.Process) {
	t.Helper()
	x := startProcess(t, args...)
	return x, x.proc
}

// leads reads the exporter's leader metric.
func (x *testExporter) leads() bool {
	code, body := x.get("/metrics")
	v, ok := testutil.Metric(x.t, body, "proxy_operator_crd_writer_leader")
	return code == http.StatusOK && ok && v == 1
}

// TestCRDWriterFencedAfterFreeze freezes the leading replica (SIGSTOP) past its lease, lets the
// other replica take over and write, and wakes the frozen one with a reload pending (a new
// provider, whose object it would create): counted in the API server's audit log, it makes no
// write request at all (objects, Events), and then follows.
func TestCRDWriterFencedAfterFreeze(t *testing.T) {
	env := kube.Start(t)
	gce := startGCE(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	const userA, userB = "replica-a", "replica-b"
	env.AddUser(userA, "system:masters")
	env.AddUser(userB, "system:masters")
	providers := gce.writeProviders(t, "", gcpProvider{"alpha", "alpha-project"})
	common := []string{"--config.file=" + providers, "--provider-check-interval=10s",
		"--crd.enabled", "--crd.leader-elect", "--crd.lease-namespace=default", "--crd.instance=fence-test",
		// A heartbeat due every second: the frozen leader has a status write due the moment
		// it wakes.
		"--crd.heartbeat-interval=1s"}
	a, procA := startSubprocessExporter(t, append(common, "--crd.kubeconfig="+env.KubeconfigFor(userA))...)
	testutil.Eventually(t, 30*time.Second, "replica a to lead", a.leads)
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig)
	exists := func(name string) bool {
		_, err := dyn.Resource(phResource).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil
	}
	testutil.Eventually(t, 30*time.Second, "a to write alpha", func() bool { return exists("alpha") })
	b, procB := startSubprocessExporter(t, append(common, "--crd.kubeconfig="+env.KubeconfigFor(userB))...)
	testutil.Eventually(t, 30*time.Second, "replica b to serve", func() bool { code, _ := b.get("/-/ready"); return code == http.StatusOK })
	if b.leads() {
		t.Fatal("both replicas lead")
	}

	// Freeze a. A reload adds a provider; a's SIGHUP waits for it to wake.
	if err := procA.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	t.Cleanup(func() {
		if frozen {
			_ = procA.Cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	gce.writeProviders(t, providers, gcpProvider{"alpha", "alpha-project"}, gcpProvider{"beta", "beta-project"})
	for _, p := range []*testutil.Process{procA, procB} {
		if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// Past the lease (15s) b takes over and writes, beta included.
	testutil.Eventually(t, 40*time.Second, "b to take over", b.leads)
	testutil.Eventually(t, 30*time.Second, "b to write beta", func() bool { return exists("beta") })
	writesOfA := func() int {
		return env.CountRequests(t, func(e kube.AuditEvent) bool {
			if e.User != userA {
				return false
			}
			switch e.Verb {
			case "create", "update", "patch", "delete", "deletecollection":
				return e.Resource == v1alpha1.Resource || e.Resource == "events"
			}
			return false
		})
	}
	before := writesOfA()

	// Wake a: it still holds its old view of the Lease, a new snapshot (the reload) and a due
	// round.
	if err := procA.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen = false
	testutil.Eventually(t, 20*time.Second, "a to reload after waking", func() bool { return a.logs.Find("providers file reloaded") != nil })
	testutil.Eventually(t, 20*time.Second, "a to follow", func() bool {
		code, _ := a.get("/-/ready")
		return code == http.StatusOK && !a.leads()
	})
	if n := writesOfA() - before; n != 0 {
		t.Errorf("the woken replica made %d write requests; logs:\n%s", n, a.logs.String())
	}
	// Which guard stopped it depends on what ran first after the wake: a write (the heartbeat
	// due, the reload) meets the fence; a renewal attempt observes b and ends the term.
	fenced := a.logs.Find("the last renewal of the lease is older than the renew deadline: writing nothing until it is renewed") != nil
	ended := a.logs.Find("another replica holds the lease now; stopped writing ProviderHealth objects") != nil
	t.Logf("after the wake: fenced by the renewal's age %v, term ended on observing b %v", fenced, ended)
	if !ended {
		t.Errorf("the woken replica did not log the end of its term; logs:\n%s", a.logs.String())
	}
	if !b.leads() {
		t.Error("b stopped leading after a woke")
	}
}

// TestSinceAgreesOnPageAndObject: a target that changes reason while it stays down keeps its
// since-time, and the status page and the ProviderHealth object show the same one.
func TestSinceAgreesOnPageAndObject(t *testing.T) {
	env := kube.Start(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	gce := startGCE(t)
	// The provider's one target is its project; the server's answers set its reason.
	gce.server.SetFailure(http.StatusInternalServerError) // APIError
	providers := gce.writeProviders(t, "", gcpProvider{"since", "since-project"})
	x := startExporter(t, "--config.file="+providers, "--provider-check-interval=10s",
		"--crd.enabled", "--crd.kubeconfig="+env.Kubeconfig, "--crd.min-reason-interval=0") // the reason change at once
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig)
	object := func() (reason, since string) {
		u, err := dyn.Resource(phResource).Get(context.Background(), "since", metav1.GetOptions{})
		if err != nil {
			return "", ""
		}
		targets, _, _ := unstructured.NestedSlice(u.Object, "status", "targets")
		if len(targets) != 1 {
			return "", ""
		}
		tm := targets[0].(map[string]any)
		ts, err := time.Parse(time.RFC3339, tm["lastTransitionTime"].(string))
		if err != nil {
			t.Fatalf("object's lastTransitionTime: %v", err)
		}
		return tm["reason"].(string), ts.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	// The target's row under the provider "since" (status page markup in exporter/landing.go).
	rowRE := regexp.MustCompile(`(?s)<tbody id="provider-since">.*?<tr class="target"><td><a href="[^"]*">since-project</a></td>\s*<td class="down">down</td>\s*<td[^>]*>(\w+)</td><td>[^<]*</td>\s*<td class="time">([^<]+)<br>`)
	page := func() (reason, since string) {
		_, body := x.get("/")
		m := rowRE.FindStringSubmatch(body)
		if m == nil {
			return "", ""
		}
		return m[1], m[2]
	}
	testutil.Eventually(t, 30*time.Second, "the object to show APIError", func() bool { r, _ := object(); return r == "APIError" })
	_, downSince := object()

	gce.server.SetFailure(http.StatusForbidden) // Forbidden, still down
	testutil.Eventually(t, 30*time.Second, "the object to show Forbidden", func() bool { r, _ := object(); return r == "Forbidden" })
	objReason, objSince := object()
	pageReason, pageSince := page()
	if pageReason != objReason || pageSince != objSince {
		t.Errorf("page says %s since %q, object says %s since %q", pageReason, pageSince, objReason, objSince)
	}
	if objSince != downSince {
		t.Errorf("a change of reason while down moved since from %s to %s", downSince, objSince)
	}
}

// TestTwoInstancesKeepToTheirOwn runs two exporter deployments (the real binary) of different
// --crd.instance against one API server, both configuring a provider named "shared": each writes
// only its own objects, the second reports the clash, and a restart and a checks-off run of one
// leave the other's objects untouched.
func TestTwoInstancesKeepToTheirOwn(t *testing.T) {
	env := kube.Start(t)
	gce := startGCE(t)
	env.ApplyCRDFile(t, repoFile("deploy", "crd"))
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig)
	labels := func(name string) map[string]string {
		u, err := dyn.Resource(phResource).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return u.GetLabels()
	}
	filesA := gce.writeProviders(t, "", gcpProvider{"a-only", "a-project"}, gcpProvider{"shared", "shared-a"})
	filesB := gce.writeProviders(t, "", gcpProvider{"b-only", "b-project"}, gcpProvider{"shared", "shared-b"})
	exporter := func(instance, file, interval string) (*testExporter, *testutil.Process) {
		return startSubprocessExporter(t, "--config.file="+file, "--provider-check-interval="+interval,
			"--crd.enabled", "--crd.kubeconfig="+env.Kubeconfig, "--crd.instance="+instance, "--crd.heartbeat-interval=1s")
	}
	stop := func(p *testutil.Process) {
		t.Helper()
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Fatalf("exporter exit: %v", err)
		}
	}
	_, procA := exporter("team-a", filesA, "10s")
	testutil.Eventually(t, 30*time.Second, "team-a's objects", func() bool {
		return labels("a-only")["providerhealth.io/instance"] == "team-a" && labels("shared")["providerhealth.io/instance"] == "team-a"
	})
	b, procB := exporter("team-b", filesB, "10s")
	testutil.Eventually(t, 30*time.Second, "team-b's object", func() bool { return labels("b-only")["providerhealth.io/instance"] == "team-b" })
	testutil.Eventually(t, 30*time.Second, "team-b to report the clash", func() bool {
		_, body := b.get("/metrics")
		v, ok := testutil.Metric(t, body, "proxy_operator_crd_writer_name_clashes")
		return ok && v == 1
	})
	if r := b.logs.Await(t, 10*time.Second, "the ProviderHealth object of this provider's name belongs to someone else; leaving it alone (rename one of the providers)"); r["provider"] != "shared" {
		t.Errorf("the clash log record: %v", r)
	}
	shared, err := dyn.Resource(phResource).Get(context.Background(), "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := dynamic.NewForConfigOrDie(env.AdminConfig).Resource(schema.GroupVersionResource{Version: "v1", Resource: "events"}).Namespace("default").
		List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(shared.GetUID()) + ",reason=NameClash"})
	if err != nil || len(events.Items) != 1 {
		t.Errorf("NameClash Events on the shared object: %v (err %v), want 1", len(events.Items), err)
	}

	// team-b restarts without its providers, then runs with checks off: team-a's objects stay.
	stop(procB)
	gce.writeProviders(t, filesB)
	_, procB = exporter("team-b", filesB, "10s")
	testutil.Eventually(t, 30*time.Second, "team-b's restart to collect b-only", func() bool { return labels("b-only") == nil })
	stop(procB)
	gce.writeProviders(t, filesB, gcpProvider{"b-only", "b-project"})
	_, procB = exporter("team-b", filesB, "10s")
	testutil.Eventually(t, 30*time.Second, "team-b to write b-only again", func() bool { return labels("b-only") != nil })
	stop(procB)
	_, procB = exporter("team-b", filesB, "0")
	testutil.Eventually(t, 30*time.Second, "team-b's checks-off run to delete b-only", func() bool { return labels("b-only") == nil })
	stop(procB)
	after, err := dyn.Resource(phResource).Get(context.Background(), "shared", metav1.GetOptions{})
	if err != nil || after.GetUID() != shared.GetUID() || labels("a-only") == nil {
		t.Fatalf("team-b's restarts and checks-off run touched team-a's objects (shared: %v)", err)
	}
	stop(procA)
}
