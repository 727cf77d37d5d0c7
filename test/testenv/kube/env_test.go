package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
)

// kubectl runs the machine's kubectl with kubeconfig and fails the test if it fails.
func kubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := Kubectl(t, nil, append(ClusterFlags(t, kubeconfig), args...)...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestSmokeKubectl is the smoke test of the environment: the machine's kubectl lists the
// namespaces through the generated kubeconfig, and a CRD applied by the helper is usable at once.
func TestSmokeKubectl(t *testing.T) {
	env := Start(t)

	out := kubectl(t, env.Kubeconfig, "get", "namespaces", "-o", "name")
	for _, ns := range []string{"namespace/default", "namespace/kube-system"} {
		if !slices.Contains(strings.Fields(out), ns) {
			t.Errorf("kubectl get namespaces = %q, want %s in it", out, ns)
		}
	}

	crds := env.ApplyCRDFile(t, filepath.Join("testdata", "widgets-crd.yaml"))
	if len(crds) != 1 || crds[0].Name != "widgets.testenv.example.com" {
		t.Fatalf("ApplyCRDFile applied %d CRDs, want widgets.testenv.example.com", len(crds))
	}
	if !isEstablished(crds[0]) {
		t.Errorf("ApplyCRDFile returned a CRD that is not Established: %+v", crds[0].Status.Conditions)
	}
	kubectl(t, env.Kubeconfig, "apply", "-f", filepath.Join("testdata", "widget.yaml"))
	out = kubectl(t, env.Kubeconfig, "get", "widgets", "-n", "default", "-o", "name")
	if strings.TrimSpace(out) != "widget.testenv.example.com/sprocket" {
		t.Errorf("kubectl get widgets = %q, want widget.testenv.example.com/sprocket", out)
	}
	// Applying the same CRD again updates it instead of failing.
	env.ApplyCRDFile(t, filepath.Join("testdata", "widgets-crd.yaml"))
}

// TestIdentitiesAndAudit covers minted identities (RBAC decides, unknown tokens are refused)
// and the audit log's view of each request.
func TestIdentitiesAndAudit(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)

	token := env.AddUser("reader", "readers")
	if again := env.AddUser("reader"); again != token {
		t.Errorf("AddUser of an existing user minted a new token")
	}
	reader := kubernetes.NewForConfigOrDie(env.ConfigFor("reader"))
	if _, err := reader.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("reader listing pods before any binding: err = %v, want Forbidden", err)
	}

	// Bind a role to the group: the groups given to AddUser reach the authorizer.
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-lister"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "readers-list-pods"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pod-lister"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "readers"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := reader.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("reader listing pods after the binding: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	stranger := kubernetes.NewForConfigOrDie(&rest.Config{
		Host: env.URL, BearerToken: "not-a-known-token",
		TLSClientConfig: rest.TLSClientConfig{CAData: env.CAData},
	})
	if _, err := stranger.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("unknown token: err = %v, want Unauthorized", err)
	}
	// The same through a kubeconfig written for an arbitrary token.
	out, err := Kubectl(t, nil, append(ClusterFlags(t, env.KubeconfigWithToken("stranger", "not-a-known-token")), "get", "namespaces")...)
	if err == nil || !strings.Contains(out, "You must be logged in to the server") {
		t.Errorf("kubectl with an unknown token: err = %v, output %q; want kubectl's 401 failure", err, out)
	}

	// Three config maps, then one list with limit=1 by the reader-less admin.
	for i := range 3 {
		_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i), Labels: map[string]string{"audit": "yes"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := admin.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "audit=yes", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Continue == "" {
		t.Fatalf("list with limit=1 returned %d items, continue %q", len(list.Items), list.Continue)
	}
	var lists []AuditEvent
	creates := 0
	for _, ev := range env.AuditEvents(t) {
		if ev.User != AdminUser || ev.Resource != "configmaps" {
			continue
		}
		switch ev.Verb {
		case "list":
			lists = append(lists, ev)
		case "create":
			creates++
		}
	}
	if creates != 3 {
		t.Errorf("audit log holds %d config map creates by admin, want 3", creates)
	}
	if len(lists) != 1 {
		t.Fatalf("audit log holds %d config map lists by admin, want 1: %+v", len(lists), lists)
	}
	if ev := lists[0]; !strings.Contains(ev.RequestURI, "limit=1") || ev.Namespace != "default" || ev.Code != 200 || ev.ResponseItems != 1 || ev.ResponseKind != "ConfigMapList" {
		t.Errorf("audit event of the list = %+v; want limit=1 in the URI, namespace default, code 200, a ConfigMapList of 1 item", ev)
	}
	readerLists := env.CountRequests(t, func(ev AuditEvent) bool {
		return ev.User == "reader" && ev.Verb == "list" && ev.Resource == "pods"
	})
	if readerLists < 2 {
		t.Errorf("audit log holds %d pod lists by reader, want at least 2 (one forbidden, one allowed)", readerLists)
	}
}

// TestStopRestart: while stopped the API server refuses connections at its address; after
// Restart it serves the same data at the same address.
func TestStopRestart(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url := env.URL
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := admin.CoreV1().Namespaces().Get(ctx, "survivor", metav1.GetOptions{})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("request while stopped: err = %v, want connection refused", err)
	}
	if err := env.Restart(); err != nil {
		t.Fatal(err)
	}
	if env.URL != url {
		t.Errorf("URL changed across Restart: %s, then %s", url, env.URL)
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace created before the restart: %v", err)
	}
}

// TestNoProcessLeftBehind kills a test process that runs an environment, with no chance to
// clean up, and checks that etcd and kube-apiserver die with it.
func TestNoProcessLeftBehind(t *testing.T) {
	if os.Getenv("KUBE_TESTENV_CHILD") == "1" {
		env := Start(t)
		fmt.Printf("PIDS %d %d\n", env.apiserver.PID(), env.etcd.PID())
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	// Let the parent find (or build) the binaries first, so the child does not time out.
	requireBinaries(t, t.Logf)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoProcessLeftBehind$", "-test.v")
	// The killed child cannot remove its temporary directory: it goes under this test's.
	cmd.Env = testenv.ChildEnv(t.TempDir(), "KUBE_TESTENV_CHILD=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	var transcript strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		transcript.WriteString(sc.Text() + "\n")
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "PIDS" {
			for _, s := range f[1:] {
				pid, _ := strconv.Atoi(s)
				pids = append(pids, pid)
			}
		}
	}
	_ = cmd.Wait()
	if len(pids) != 2 {
		t.Fatalf("child test did not report its daemons:\n%s", transcript.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			// A zombie still answers kill 0 until reaped; /proc tells the state.
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived the test process that started it", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
