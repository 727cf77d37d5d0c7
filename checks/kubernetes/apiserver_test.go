package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// bulkObjects is how many labelled objects exist when the check must still list only one.
const bulkObjects = 2000

func bindClusterRole(t *testing.T, admin kubernetes.Interface, name string, rules []rbacv1.PolicyRule, users ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var subjects []rbacv1.Subject
	for _, u := range users {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u})
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createBulk(t *testing.T, cfg *rest.Config, ns string, n int) { createBulkB(t, cfg, ns, n) }

// createBulkB creates n config maps in namespace ns carrying the platform's managed-by label.
func createBulkB(t testing.TB, cfg *rest.Config, ns string, n int) {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 2000, 2000 // the default client-side limit (5/s) would take minutes
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Name:   fmt.Sprintf("bulk-%05d", i),
						Labels: map[string]string{"app.kubernetes.io/managed-by": "proxy-operator"},
					},
					Data: map[string]string{"payload": strings.Repeat("x", 256)},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create config map: %v", err)
	}
}

// TestAgainstAPIServer checks a real kube-apiserver (etcd + kube-apiserver started by the
// test) with identities of every kind, and counts the requests at the server's audit log.
func TestAgainstAPIServer(t *testing.T) {
	env := kube.Start(t)
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)
	logs := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// Every credential used below; none may appear in a message or a log line.
	tokens := []string{env.AdminConfig.BearerToken}
	mint := func(user string) string {
		tok := env.AddUser(user)
		tokens = append(tokens, tok)
		return env.KubeconfigFor(user)
	}
	podLister := mint("pod-lister")
	podGetter := mint("pod-getter")
	bulkChecker := mint("bulk-checker")
	lateChecker := mint("late-checker")
	badToken := "not-a-token-the-server-knows-0123456789"
	tokens = append(tokens, badToken)
	intruder := env.KubeconfigWithToken("intruder", badToken)

	bindClusterRole(t, admin, "list-pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}, "pod-lister", "late-checker")
	// get and watch, but not list: the check must see Forbidden.
	bindClusterRole(t, admin, "get-pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "watch"}}}, "pod-getter")
	bindClusterRole(t, admin, "list-configmaps", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}}, "bulk-checker")

	run := func(t *testing.T, p config.Provider) checks.TargetResult {
		t.Helper()
		return checkOnce(t, newChecker(t, p, logger), context.Background())
	}
	var messages []string // every result's message, grepped for tokens at the end
	expect := func(t *testing.T, r checks.TargetResult, want checks.Reason, wantTarget string) {
		t.Helper()
		messages = append(messages, r.Message)
		if r.Reason != want {
			t.Fatalf("reason %s, want %s (message %q)", r.Reason, want, r.Message)
		}
		if r.Target != wantTarget {
			t.Errorf("target %q, want %q", r.Target, wantTarget)
		}
		t.Logf("%s: %s", r.Reason, r.Message)
	}

	t.Run("ReadyAsAdmin", func(t *testing.T) {
		r := run(t, provider("cluster-main", env.Kubeconfig, ""))
		expect(t, r, checks.ReasonReady, "admin@testenv")
		if !strings.Contains(r.Message, "pods (v1) in all namespaces") {
			t.Errorf("message %q does not say what was listed", r.Message)
		}
	})

	t.Run("ReadyWithListOnly", func(t *testing.T) {
		expect(t, run(t, provider("cluster-main", podLister, "")), checks.ReasonReady, "pod-lister@testenv")
	})

	t.Run("ReadyWithDefaultsLeftEmpty", func(t *testing.T) {
		r := run(t, provider("cluster-main", env.Kubeconfig, "admin@testenv", func(kc *Config) {
			kc.Version, kc.Resource, kc.LabelSelector = "", "", ""
		}))
		expect(t, r, checks.ReasonReady, "admin@testenv")
		if !strings.Contains(r.Message, "pods (v1)") {
			t.Errorf("message %q: empty version and resource should list v1 pods", r.Message)
		}
	})

	t.Run("CloseClosesConnections", func(t *testing.T) {
		port := env.AdminConfig.Host[strings.LastIndex(env.AdminConfig.Host, ":")+1:]
		before := socketsTo(t, port)
		c := newChecker(t, provider("cluster-main", env.Kubeconfig, ""), logger)
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonReady, "admin@testenv")
		opened := 0
		for inode := range socketsTo(t, port) {
			if !before[inode] {
				opened++
			}
		}
		if opened == 0 {
			t.Fatalf("the check left no connection to the API server open: nothing for Close to close")
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// Close returns once the connections are closed: no wait is needed.
		for inode := range socketsTo(t, port) {
			if !before[inode] {
				t.Errorf("socket %s to the API server still open after Close (%d opened by the check)", inode, opened)
			}
		}
	})

	t.Run("ForbiddenWithoutList", func(t *testing.T) {
		r := run(t, provider("cluster-main", podGetter, ""))
		expect(t, r, checks.ReasonForbidden, "pod-getter@testenv")
		if !strings.Contains(r.Message, `cannot list resource "pods"`) {
			t.Errorf("message %q does not carry the API server's explanation", r.Message)
		}
	})

	t.Run("UnauthorizedWithBadToken", func(t *testing.T) {
		expect(t, run(t, provider("cluster-main", intruder, "")), checks.ReasonUnauthorized, "intruder@testenv")
	})

	// A kubeconfig rotated in place (a Secret's symlink swap: a new file renamed over the old)
	// is read again at the next check of the same checker, without a reload; one that names
	// another context says a reload is needed rather than checking it under the old name.
	t.Run("KubeconfigRotatedIsReadAgain", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		good, err := os.ReadFile(podLister)
		if err != nil {
			t.Fatal(err)
		}
		listerToken := tokens[1]
		if !strings.Contains(string(good), listerToken) {
			t.Fatal("the pod-lister kubeconfig does not hold the pod-lister token")
		}
		rotate := func(content string) {
			t.Helper()
			tmp := path + ".new"
			if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
		rotate(string(good))
		c := newChecker(t, provider("cluster-main", path, ""), logger)
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonReady, "pod-lister@testenv")
		rotate(strings.ReplaceAll(string(good), listerToken, badToken))
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonUnauthorized, "pod-lister@testenv")
		rotate(string(good))
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonReady, "pod-lister@testenv")
		if c.Stale() {
			t.Error("a checker that read its rotated kubeconfig asks to be rebuilt")
		}
		other, err := os.ReadFile(intruder)
		if err != nil {
			t.Fatal(err)
		}
		rotate(string(other))
		r := checkOnce(t, c, context.Background())
		expect(t, r, ReasonConfigError, "pod-lister@testenv")
		if !strings.Contains(r.Message, `"intruder@testenv"`) || !strings.Contains(r.Message, "reload") {
			t.Errorf("message %q does not name the new target and the reload it needs", r.Message)
		}
		if !c.Stale() {
			t.Error("a checker whose kubeconfig names another target does not ask to be rebuilt")
		}
	})

	t.Run("ResourceNotFound", func(t *testing.T) {
		r := run(t, provider("cluster-main", env.Kubeconfig, "", func(kc *Config) {
			kc.Group, kc.Version, kc.Resource = "gadgets.example.com", "v1", "gizmos"
		}))
		expect(t, r, ReasonResourceNotFound, "admin@testenv")
		r = run(t, provider("cluster-main", env.Kubeconfig, "", func(kc *Config) { kc.Resource = "podz" }))
		expect(t, r, ReasonResourceNotFound, "admin@testenv")
	})

	t.Run("CustomResourceInNamespace", func(t *testing.T) {
		env.ApplyCRD(t, []byte(gadgetCRD))
		r := run(t, provider("cluster-main", env.Kubeconfig, "", func(kc *Config) {
			kc.Group, kc.Version, kc.Resource, kc.Namespace = "gadgets.example.com", "v1", "gadgets", "default"
		}))
		expect(t, r, checks.ReasonReady, "admin@testenv")
		if !strings.Contains(r.Message, "gadgets (gadgets.example.com/v1) in namespace default") {
			t.Errorf("message %q does not say what was listed", r.Message)
		}
	})

	t.Run("APIUnreachableWithWrongCA", func(t *testing.T) {
		// The real server, but a kubeconfig that trusts only the system's roots.
		path := writeKubeconfig(t, env.URL, nil, "wrong-ca", env.AdminConfig.BearerToken)
		r := run(t, provider("cluster-main", path, ""))
		expect(t, r, checks.ReasonAPIUnreachable, "wrong-ca")
	})

	t.Run("OneSmallListAmongThousands", func(t *testing.T) {
		createBulk(t, env.AdminConfig, "bulk", bulkObjects)
		c := newChecker(t, provider("cluster-main", bulkChecker, "", func(kc *Config) {
			kc.Resource = "configmaps"
		}), logger)
		const rounds = 3
		for range rounds {
			r := checkOnce(t, c, context.Background())
			expect(t, r, checks.ReasonReady, "bulk-checker@testenv")
			if !strings.Contains(r.Message, "1 returned") || !strings.Contains(r.Message, "more exist") {
				t.Errorf("message %q: want one object returned and more existing", r.Message)
			}
		}
		var seen []kube.AuditEvent
		for _, ev := range env.AuditEvents(t) {
			if ev.User == "bulk-checker" {
				seen = append(seen, ev)
			}
		}
		if len(seen) != rounds {
			t.Fatalf("the API server saw %d requests from the checker in %d checks, want %d: %+v", len(seen), rounds, rounds, seen)
		}
		for _, ev := range seen {
			if ev.Verb != "list" || ev.Resource != "configmaps" || ev.Code != 200 ||
				!strings.Contains(ev.RequestURI, "limit=1") || !strings.Contains(ev.RequestURI, "labelSelector=") {
				t.Errorf("request %+v: want a list of configmaps with limit=1 and the label selector, answered 200", ev)
			}
			if ev.ResponseItems != 1 {
				t.Errorf("the response held %d objects, want 1 (at most 1 of the %d present)", ev.ResponseItems, bulkObjects)
			}
			if ev.ResponseKind != "PartialObjectMetadataList" {
				t.Errorf("the response was a %q, want metadata only (PartialObjectMetadataList)", ev.ResponseKind)
			}
			if ev.UserAgent != userAgent {
				t.Errorf("user agent %q, want %q", ev.UserAgent, userAgent)
			}
		}
	})

	t.Run("TimeoutWithoutRequest", func(t *testing.T) {
		c := newChecker(t, provider("cluster-main", lateChecker, ""), logger)
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonReady, "late-checker@testenv")
		count := func() int {
			return env.CountRequests(t, func(ev kube.AuditEvent) bool { return ev.User == "late-checker" })
		}
		before := count()
		if before != 1 {
			t.Fatalf("%d requests from the checker after one check, want 1", before)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		expect(t, checkOnce(t, c, ctx), checks.ReasonTimeout, "late-checker@testenv")
		if after := count(); after != before {
			t.Errorf("a check with a done context made %d requests, want 0", after-before)
		}
	})

	// Last: it stops the API server.
	t.Run("UnreachableThenReadyAgain", func(t *testing.T) {
		c := newChecker(t, provider("cluster-main", env.Kubeconfig, ""), logger)
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonReady, "admin@testenv")
		if err := env.Stop(); err != nil {
			t.Fatal(err)
		}
		r := checkOnce(t, c, context.Background())
		expect(t, r, checks.ReasonAPIUnreachable, "admin@testenv")
		// A new connection is refused; a request that went out on a pooled connection the
		// stopping server had just closed reads EOF or a reset. Either way the message must say
		// what the transport saw, not a made-up cause.
		if !strings.Contains(r.Message, "connection refused") && !strings.Contains(r.Message, "EOF") &&
			!strings.Contains(r.Message, "connection reset") {
			t.Errorf("message %q names neither a refused connection nor one the server closed", r.Message)
		}
		if err := env.Restart(); err != nil {
			t.Fatal(err)
		}
		// The same checker (and its connection pool) recovers without being rebuilt.
		expect(t, checkOnce(t, c, context.Background()), checks.ReasonReady, "admin@testenv")
	})

	t.Run("NoTokenInMessagesOrLogs", func(t *testing.T) {
		out := logs.String()
		if !strings.Contains(out, "kubernetes check done") || len(messages) < 10 {
			t.Fatalf("%d messages and no check logged: the grep below would prove nothing", len(messages))
		}
		all := strings.Join(messages, "\n")
		for i, tok := range tokens {
			if strings.Contains(out, tok) {
				t.Errorf("token %d appears in the logs", i)
			}
			if strings.Contains(all, tok) {
				t.Errorf("token %d appears in a result message", i)
			}
		}
	})
}

const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.gadgets.example.com
spec:
  group: gadgets.example.com
  scope: Namespaced
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// BenchmarkCheck measures one check (one LIST with limit=1, metadata only) against a real API
// server holding many labelled objects.
func BenchmarkCheck(b *testing.B) {
	env := kube.Start(b)
	createBulkB(b, env.AdminConfig, "bench", 500)
	c, err := New(provider("bench", env.Kubeconfig, "", func(kc *Config) { kc.Resource = "configmaps" }), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.(*Checker).Close()
	ctx := context.Background()
	for b.Loop() {
		if r := c.Check(ctx)[0]; r.Reason != checks.ReasonReady {
			b.Fatalf("reason %s: %s", r.Reason, r.Message)
		}
	}
}

// socketsTo returns the inodes of this process's established TCP connections to port (decimal),
// read from /proc: what the process holds open, whichever client opened it.
func socketsTo(t *testing.T, port string) map[string]bool {
	t.Helper()
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatalf("port %q: %v", port, err)
	}
	remote := fmt.Sprintf(":%04X", p)
	inNet := map[string]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // no IPv6
		}
		for line := range strings.Lines(string(b)) {
			fields := strings.Fields(line)
			// sl local rem st ... inode (field 9); state 01 is ESTABLISHED.
			if len(fields) > 9 && strings.HasSuffix(fields[2], remote) && fields[3] == "01" {
				inNet[fields[9]] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			if inode = strings.TrimSuffix(inode, "]"); inNet[inode] {
				out[inode] = true
			}
		}
	}
	return out
}
