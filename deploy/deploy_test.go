// Package deploy holds the kustomize manifests of the exporter; its tests render them with the
// machine's kubectl and check them, statically and against the test environment's real API
// server (test/testenv/kube) with the Prometheus Operator's CRDs installed.
package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
	"github.com/provider-health-exporter/provider-health-exporter/shard"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// render is `kubectl kustomize deploy/`, the way the docs tell users to install it.
func render(t testing.TB) []byte {
	t.Helper()
	out, err := kube.Kubectl(t, nil, "kustomize", filepath.Join(testutil.RepoRoot(t), "deploy"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/: %v\n%s", err, out)
	}
	return []byte(out)
}

// rendered is the output of kustomize, by kind.
type rendered struct {
	objs []*unstructured.Unstructured
}

func (r rendered) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one decodes the only object of kind (named name, when not empty) into into.
func (r rendered) one(t *testing.T, kind, name string, into any) {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range r.all(kind) {
		if name == "" || o.GetName() == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one %s %q in the rendered manifests, found %d", kind, name, len(found))
	}
	b, err := found[0].MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s %s: %v", kind, found[0].GetName(), err)
	}
}

// TestRenderedManifests checks what the issue asks of the rendered objects: every kind is
// there, the Deployment runs two sharded replicas (identity: the pod's name) with leader
// election under a locked-down security context, its probes, ports, ServiceAccount, ConfigMap
// and Secrets fit the other objects and the example providers file (which the exporter's own
// parser accepts), and the shard's Role grants exactly its verbs on Leases, in its namespace.
func TestRenderedManifests(t *testing.T) {
	r := rendered{kube.DecodeObjects(t, render(t))}

	var kinds []string
	for _, o := range r.objs {
		kinds = append(kinds, o.GetKind())
	}
	for _, want := range []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
		"ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service",
		"PodDisruptionBudget", "ServiceMonitor", "PrometheusRule", "AlertmanagerConfig", "NetworkPolicy"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("the rendered manifests hold no %s (kinds: %v)", want, kinds)
		}
	}
	var crd unstructured.Unstructured
	r.one(t, "CustomResourceDefinition", "providerhealths.providerhealth.io", &crd.Object)

	var ns corev1.Namespace
	r.one(t, "Namespace", "", &ns)
	var dep appsv1.Deployment
	r.one(t, "Deployment", "provider-health-exporter", &dep)
	if dep.Namespace != ns.Name {
		t.Errorf("the Deployment is in namespace %q, want %q", dep.Namespace, ns.Name)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas: %v, want 2", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, flag := range []string{"--crd.enabled", "--crd.leader-elect", "--shard.enabled"} {
		if !slices.Contains(c.Args, flag) {
			t.Errorf("the exporter's args %v lack %s", c.Args, flag)
		}
	}
	// Sharded, each replica's identity (its Lease's name) is its pod's name: $POD_NAME from the
	// downward API, and no --shard.identity that would give both replicas the same one.
	podName := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" })
	if podName < 0 || c.Env[podName].ValueFrom == nil || c.Env[podName].ValueFrom.FieldRef == nil ||
		c.Env[podName].ValueFrom.FieldRef.FieldPath != "metadata.name" || c.Env[podName].Value != "" {
		t.Errorf("the container's env %+v: want POD_NAME from the downward API's metadata.name", c.Env)
	}
	// The pod owns the writer's Lease while it holds it (so the Lease goes with the
	// Deployment): $POD_UID from the downward API.
	podUID := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_UID" })
	if podUID < 0 || c.Env[podUID].ValueFrom == nil || c.Env[podUID].ValueFrom.FieldRef == nil ||
		c.Env[podUID].ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("the container's env %+v: want POD_UID from the downward API's metadata.uid", c.Env)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--shard.identity") || strings.HasPrefix(a, "--shard.lease-namespace") {
			t.Errorf("the exporter's args set %s: the identity is the pod's name, the Leases in the pod's namespace (which the shard Role covers)", a)
		}
	}
	arg := func(name string) string {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
		}
		return ""
	}

	// Pod security: non-root, read-only root filesystem, no privilege escalation, no
	// capabilities, seccomp RuntimeDefault.
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil {
		t.Fatal("the pod or its container has no securityContext")
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext: runAsNonRoot %v, runAsUser %v; want true and a non-zero uid", psc.RunAsNonRoot, psc.RunAsUser)
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Error("the container's root filesystem is not read-only")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("the container may escalate privileges")
	}
	if csc.Privileged != nil && *csc.Privileged {
		t.Error("the container is privileged")
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and nothing added", csc.Capabilities)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("the namespace does not enforce the restricted Pod Security level: %v", ns.Labels)
	}

	// Port, probes, Service, ServiceMonitor.
	listen := arg("--web.listen-address")
	_, portText, _ := strings.Cut(listen, ":")
	port, err := strconv.Atoi(portText)
	if err != nil || len(c.Ports) != 1 || c.Ports[0].ContainerPort != int32(port) {
		t.Fatalf("--web.listen-address=%q and container ports %+v disagree", listen, c.Ports)
	}
	portName := c.Ports[0].Name
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, "/-/ready"}, {c.LivenessProbe, "/-/healthy"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != portName {
			t.Errorf("want an HTTP probe of %s on port %s, have %+v", p.path, portName, p.probe)
		}
	}
	var svc corev1.Service
	r.one(t, "Service", "", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != portName || svc.Spec.Ports[0].Port != int32(port) {
		t.Errorf("Service ports %+v, want %d targeting %s", svc.Spec.Ports, port, portName)
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("the Service's selector %v does not select the pods (%v)", svc.Spec.Selector, podLabels)
	}
	var sm struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []map[string]any     `json:"endpoints"`
			JobLabel  string               `json:"jobLabel"`
		} `json:"spec"`
	}
	sms := r.all("ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	b, _ := sms[0].MarshalJSON()
	if err := yaml.Unmarshal(b, &sm); err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(svc.Labels)) || sm.Metadata.Namespace != svc.Namespace {
		t.Errorf("the ServiceMonitor (selector %v, namespace %s) does not select the Service (labels %v, namespace %s)",
			sm.Spec.Selector, sm.Metadata.Namespace, svc.Labels, svc.Namespace)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0]["port"] != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0]["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v, want /metrics on port %s", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	// The rules select the job the ServiceMonitor gives its targets: without spec.jobLabel the
	// Prometheus Operator names the job after the Service. Any other job and no alert fires.
	if sm.Spec.JobLabel != "" {
		t.Errorf("the ServiceMonitor sets jobLabel %q: the job would come from the Service's label, not its name", sm.Spec.JobLabel)
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert  string `json:"alert"`
					Record string `json:"record"`
					Expr   string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	prs := r.all("PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(prs))
	}
	b, _ = prs[0].MarshalJSON()
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	jobMatcher := regexp.MustCompile(`\bjob\s*(=~?|!=|!~)\s*"([^"]*)"`)
	wantJob := fmt.Sprintf(`job="%s"`, svc.Name)
	selecting := 0
	for _, g := range pr.Spec.Groups {
		for _, rule := range g.Rules {
			for _, m := range jobMatcher.FindAllStringSubmatch(rule.Expr, -1) {
				selecting++
				if m[1] != "=" || m[2] != svc.Name {
					t.Errorf("rule %s%s selects %s, want %s (the Service's name, the ServiceMonitor's job)", rule.Alert, rule.Record, m[0], wantJob)
				}
			}
		}
	}
	if selecting == 0 {
		t.Errorf("no rule of the PrometheusRule selects a job: want %s", wantJob)
	}

	checkNetworkPolicy(t, r, podLabels, c.Ports[0])

	// PodDisruptionBudget: keeps one replica, selects the pods.
	var pdb policyv1.PodDisruptionBudget
	r.one(t, "PodDisruptionBudget", "", &pdb)
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !pdbSel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not select the pods", pdb.Spec.Selector)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= int(*dep.Spec.Replicas) {
		t.Errorf("PodDisruptionBudget minAvailable %v: want at least 1 and fewer than the %d replicas", pdb.Spec.MinAvailable, *dep.Spec.Replicas)
	}

	// Resources: requests and limits for CPU and memory, each request within its limit.
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[name]
		lim, okLim := c.Resources.Limits[name]
		if !okReq || !okLim || req.Cmp(lim) > 0 {
			t.Errorf("%s: request %v, limit %v; want both, the request within the limit", name, req.String(), lim.String())
		}
	}
	// The memory request covers the largest resident memory measured in docs/benchmarks.md.
	if peak := measuredPeakRSS(t); c.Resources.Requests.Memory().Cmp(peak) < 0 {
		t.Errorf("memory request %s is below the exporter's measured resident memory %s (docs/benchmarks.md)", c.Resources.Requests.Memory(), peak.String())
	}

	// ServiceAccount: the one deploy/rbac/ binds.
	var sa corev1.ServiceAccount
	r.one(t, "ServiceAccount", "", &sa)
	if pod.ServiceAccountName != sa.Name || sa.Namespace != dep.Namespace {
		t.Errorf("the pods run as %s/%s; the ServiceAccount is %s/%s", dep.Namespace, pod.ServiceAccountName, sa.Namespace, sa.Name)
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range r.all(kind) {
			var rb rbacv1.RoleBinding // same shape for both kinds
			b, _ := o.MarshalJSON()
			if err := yaml.Unmarshal(b, &rb); err != nil {
				t.Fatal(err)
			}
			for _, s := range rb.Subjects {
				if s.Kind != "ServiceAccount" || s.Name != sa.Name || s.Namespace != sa.Namespace {
					t.Errorf("%s %s binds %+v, not the exporter's ServiceAccount", kind, rb.Name, s)
				}
			}
		}
	}

	checkShardRBAC(t, r, dep.Namespace, sa)

	// Viewer role: read-only on providerhealths, aggregated into "view".
	var viewer rbacv1.ClusterRole
	r.one(t, "ClusterRole", "provider-health-exporter-viewer", &viewer)
	if viewer.Labels["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
		t.Errorf("the viewer role is not labelled for aggregation into view: %v", viewer.Labels)
	}
	if len(viewer.Rules) != 1 || !slices.Equal(viewer.Rules[0].Verbs, []string{"get", "list", "watch"}) ||
		!slices.Equal(viewer.Rules[0].Resources, []string{"providerhealths"}) || !slices.Equal(viewer.Rules[0].APIGroups, []string{"providerhealth.io"}) {
		t.Errorf("viewer rules %+v, want get, list, watch on providerhealth.io providerhealths", viewer.Rules)
	}

	// The image: the project's published image (the Helm chart's default too), at the version
	// of VERSION, so that the manifests as shipped pull an image that exists.
	version, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ghcr.io/provider-health-exporter/provider-health-exporter:v" + strings.TrimSpace(string(version)); c.Image != want {
		t.Errorf("image %q, want %q (the published image, at VERSION)", c.Image, want)
	}

	checkProvidersFile(t, r, pod, c, arg("--config.file"))
}

// shardVerbs are the verbs the shard uses on its Leases (docs/deploy.md, RBAC).
var shardVerbs = []string{"get", "list", "create", "update", "delete"}

// shardPartVerbs are the verbs the shard uses on its ProviderHealthParts.
var shardPartVerbs = []string{"get", "list", "watch", "create", "update", "delete"}

// checkShardRBAC: the shard's Role grants exactly shardVerbs on coordination.k8s.io leases in
// the Deployment's namespace, on no resource name (Leases are named by pod), and a RoleBinding
// there binds it to the exporter's ServiceAccount; no ClusterRole grants anything on Leases.
func checkShardRBAC(t *testing.T, r rendered, namespace string, sa corev1.ServiceAccount) {
	t.Helper()
	var role rbacv1.Role
	r.one(t, "Role", "provider-health-exporter-shard", &role)
	if role.Namespace != namespace {
		t.Errorf("the shard Role is in namespace %q, the Deployment (and its Leases) in %q", role.Namespace, namespace)
	}
	if len(role.Rules) != 2 {
		t.Fatalf("the shard Role has %d rules, want 2 (Leases, parts): %+v", len(role.Rules), role.Rules)
	}
	for i, want := range []struct {
		group, resource string
		verbs           []string
	}{{"coordination.k8s.io", "leases", shardVerbs}, {"providerhealth.io", "providerhealthparts", shardPartVerbs}} {
		rule := role.Rules[i]
		verbs := slices.Sorted(slices.Values(rule.Verbs))
		if wantVerbs := slices.Sorted(slices.Values(want.verbs)); !slices.Equal(verbs, wantVerbs) ||
			!slices.Equal(rule.APIGroups, []string{want.group}) || !slices.Equal(rule.Resources, []string{want.resource}) ||
			len(rule.ResourceNames) != 0 || len(rule.NonResourceURLs) != 0 {
			t.Errorf("the shard Role's rule %+v: want exactly the verbs %v on %s %s, on every name", rule, wantVerbs, want.group, want.resource)
		}
	}
	var rb rbacv1.RoleBinding
	r.one(t, "RoleBinding", "provider-health-exporter-shard", &rb)
	if rb.Namespace != namespace || rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("the shard RoleBinding %s/%s (role %+v, subjects %+v) does not bind the shard Role to %s/%s in %s",
			rb.Namespace, rb.Name, rb.RoleRef, rb.Subjects, sa.Namespace, sa.Name, namespace)
	}
	for _, o := range r.all("ClusterRole") {
		var cr rbacv1.ClusterRole
		b, _ := o.MarshalJSON()
		if err := yaml.Unmarshal(b, &cr); err != nil {
			t.Fatal(err)
		}
		for _, rule := range cr.Rules {
			if slices.Contains(rule.Resources, "leases") || slices.Contains(rule.Resources, "*") {
				t.Errorf("ClusterRole %s grants %v on %v: the Leases are the exporter's namespace's only", cr.Name, rule.Verbs, rule.Resources)
			}
		}
	}
}

// checkNetworkPolicy: the NetworkPolicy isolates the exporter's pods for ingress only (egress
// stays open: docs/deploy.md says why), and admits the scrape port, by the container's port name,
// from pods labelled as the Prometheus Operator labels Prometheus, in any namespace, and from
// nothing else: no other port, no ipBlock, no peer without a pod selector.
func checkNetworkPolicy(t *testing.T, r rendered, podLabels labels.Set, port corev1.ContainerPort) {
	t.Helper()
	var np networkingv1.NetworkPolicy
	r.one(t, "NetworkPolicy", "", &np)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the NetworkPolicy's podSelector %v does not select the exporter's pods (%v)", np.Spec.PodSelector, podLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Egress) != 0 {
		t.Errorf("NetworkPolicy policyTypes %v, egress %v: want Ingress only, egress unrestricted", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("NetworkPolicy: %d ingress rules, want 1 (the scrape port)", len(np.Spec.Ingress))
	}
	rule := np.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.String() != port.Name ||
		rule.Ports[0].Protocol == nil || *rule.Ports[0].Protocol != corev1.ProtocolTCP || rule.Ports[0].EndPort != nil {
		t.Errorf("NetworkPolicy ports %+v, want only TCP %s (the container's port %d)", rule.Ports, port.Name, port.ContainerPort)
	}
	prometheus := labels.Set{"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/managed-by": "prometheus-operator", "prometheus": "k8s"}
	other := labels.Set{"app.kubernetes.io/name": "grafana"}
	if len(rule.From) != 1 {
		t.Fatalf("NetworkPolicy: %d peers, want 1 (Prometheus)", len(rule.From))
	}
	peer := rule.From[0]
	if peer.IPBlock != nil || peer.PodSelector == nil || peer.NamespaceSelector == nil {
		t.Fatalf("NetworkPolicy peer %+v: want a pod selector in a namespace selector, no ipBlock", peer)
	}
	podSel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil || !podSel.Matches(prometheus) || podSel.Matches(other) || podSel.Matches(podLabels) {
		t.Errorf("NetworkPolicy pod selector %v: want it to match a Prometheus Operator pod %v, not %v nor the exporter", peer.PodSelector, prometheus, other)
	}
}

// checkProvidersFile: the ConfigMap the Deployment mounts holds the file --config.file names,
// the exporter's parser accepts it, and every credential file it names is in a mounted Secret.
func checkProvidersFile(t *testing.T, r rendered, pod corev1.PodSpec, c corev1.Container, configFile string) {
	t.Helper()
	mounts := map[string]corev1.Volume{} // by mount path
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("volume mount %s names no volume", m.Name)
		}
		if !m.ReadOnly {
			t.Errorf("volume %s is mounted writable", m.Name)
		}
		mounts[m.MountPath] = pod.Volumes[i]
	}
	vol, ok := mounts[filepath.Dir(configFile)]
	if !ok || vol.ConfigMap == nil {
		t.Fatalf("--config.file=%s is not in a mounted ConfigMap (mounts %v)", configFile, mounts)
	}
	var cm corev1.ConfigMap
	r.one(t, "ConfigMap", vol.ConfigMap.Name, &cm)
	data, ok := cm.Data[filepath.Base(configFile)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, filepath.Base(configFile))
	}
	cfg, err := config.Parse(configFile, []byte(data))
	if err != nil {
		t.Fatalf("the example providers file: %v", err)
	}
	types := map[string]bool{}
	var files []string
	for _, p := range cfg.Providers {
		types[p.Type] = true
		for _, f := range p.Block.Files() {
			files = append(files, f.Path)
		}
	}
	if len(types) != 3 {
		t.Errorf("the example providers file covers the types %v, want all three", types)
	}
	secrets := map[string]bool{}
	for _, f := range files {
		if f == "" {
			continue
		}
		v, ok := mounts[filepath.Dir(f)]
		if !ok || v.Secret == nil {
			t.Errorf("the providers file names %s, which is in no mounted Secret", f)
			continue
		}
		secrets[v.Secret.SecretName] = true
		if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0 {
			t.Errorf("Secret volume %s is readable by others (defaultMode %v)", v.Name, v.Secret.DefaultMode)
		}
	}
	if len(secrets) != 3 {
		t.Errorf("credentials come from Secrets %v, want the ssh, gcp and kubeconfigs Secrets", secrets)
	}
}

// measuredPeakRSS reads the largest resident memory of the real exporter at 10,000 targets from
// docs/benchmarks.md (the ExporterRSS10000Targets row, "now").
func measuredPeakRSS(t *testing.T) resource.Quantity {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\| ExporterRSS10000Targets \| promhttp \(now\) \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+) \|`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/benchmarks.md has no ExporterRSS10000Targets row for the current path: update this test with the figure the Deployment is sized from")
	}
	mib, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return *resource.NewQuantity(int64(mib*(1<<20)), resource.BinarySI)
}

// TestManifestsAgainstAPIServer installs the Prometheus Operator's CRDs into a real API server,
// then `kubectl apply --dry-run=server --validate=strict` must accept every rendered object (and
// refuses a field that does not exist, so the validation is real). Applied for real, the viewer
// role gives read access and nothing more, and the built-in view role aggregates it.
func TestManifestsAgainstAPIServer(t *testing.T) {
	manifest := render(t)
	objs := kube.DecodeObjects(t, manifest)
	crds := kube.OperatorCRDs(t)
	env := kube.Start(t)
	applied := env.ApplyCRD(t, crds)
	var names []string
	for _, c := range applied {
		names = append(names, c.Name)
	}
	for _, want := range []string{"servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com", "alertmanagerconfigs.monitoring.coreos.com"} {
		if !slices.Contains(names, want) {
			t.Fatalf("the generated operator CRDs lack %s (have %v)", want, names)
		}
	}
	kubectl := func(stdin []byte, args ...string) (string, error) {
		return kube.Kubectl(t, stdin, append(kube.ClusterFlags(t, env.Kubeconfig), args...)...)
	}

	// The namespace must exist for a dry run of the objects in it.
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			b, _ := o.MarshalJSON()
			if out, err := kubectl(b, "create", "-f", "-"); err != nil {
				t.Fatalf("create the namespace: %v\n%s", err, out)
			}
		}
	}
	out, err := kubectl(manifest, "apply", "--dry-run=server", "--validate=strict", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server --validate=strict refused the manifests: %v\n%s", err, out)
	}
	for _, o := range objs {
		gk := schema.FromAPIVersionAndKind(o.GetAPIVersion(), o.GetKind()).GroupKind()
		line := fmt.Sprintf("%s/%s", strings.ToLower(gk.String()), o.GetName())
		if !strings.Contains(out, line) {
			t.Errorf("the dry run did not report %s:\n%s", line, out)
		}
	}
	if n := strings.Count(out, "(server dry run)"); n != len(objs) {
		t.Errorf("the dry run reported %d objects, the manifests hold %d:\n%s", n, len(objs), out)
	}

	// A misspelt field is refused: strict validation is on and reaches the server.
	bad := bytes.Replace(manifest, []byte("readOnlyRootFilesystem: true"), []byte("readOnlyRootFileSystem: true"), 1)
	if bytes.Equal(bad, manifest) {
		t.Fatal("no readOnlyRootFilesystem in the manifests to misspell")
	}
	if out, err := kubectl(bad, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err == nil || !strings.Contains(out, "readOnlyRootFileSystem") {
		t.Errorf("a misspelt field was not refused (err %v):\n%s", err, out)
	}

	// The AlertmanagerConfig is checked against its schema too: a misspelt matcher list and a
	// match type outside the enum are refused.
	for from, to := range map[string]string{"targetMatch:": "targetMatchers:", "matchType: =\n": "matchType: ==\n"} {
		bad := bytes.Replace(manifest, []byte(from), []byte(to), 1)
		if bytes.Equal(bad, manifest) {
			t.Fatalf("no %s in the manifests to break", from)
		}
		if out, err := kubectl(bad, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err == nil || !strings.Contains(strings.ToLower(out), "alertmanagerconfig") {
			t.Errorf("the AlertmanagerConfig with %s instead of %s was not refused (err %v):\n%s", to, from, err, out)
		}
	}

	// Applied for real (server-side: the CRD is applied as a whole), then the viewer role.
	if out, err := kubectl(manifest, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	// Pod security, judged by the API server's own PodSecurity admission: the namespace
	// enforces "restricted", which it applies to Pods (not to Deployments), so a Pod made of
	// the Deployment's template must be admitted there, and the same Pod with one setting
	// loosened must be refused.
	podOf := func(loosen func(container map[string]any)) []byte {
		t.Helper()
		var dep *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Deployment" {
				dep = o
			}
		}
		if dep == nil {
			t.Fatal("no Deployment in the manifests")
		}
		spec, ok, err := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
		if !ok || err != nil {
			t.Fatalf("the Deployment has no pod template spec: %v", err)
		}
		if loosen != nil {
			containers, _ := spec["containers"].([]any)
			if len(containers) == 0 {
				t.Fatal("the pod template has no container")
			}
			loosen(containers[0].(map[string]any))
		}
		pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "pod-security-check", "namespace": dep.GetNamespace()}, "spec": spec}
		b, err := yaml.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if out, err := kubectl(podOf(nil), "create", "--dry-run=server", "-f", "-"); err != nil {
		t.Errorf("the Deployment's pod is refused in its namespace (Pod Security \"restricted\"): %v\n%s", err, out)
	}
	escalating := podOf(func(c map[string]any) {
		c["securityContext"].(map[string]any)["allowPrivilegeEscalation"] = true
	})
	if out, err := kubectl(escalating, "create", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(out, `violates PodSecurity "restricted`) {
		t.Errorf("a pod that may escalate privileges was not refused by Pod Security in the namespace (err %v):\n%s", err, out)
	}

	checkShardAuthorization(t, env)

	env.AddUser("oncall")
	if out, err := kubectl(nil, "create", "clusterrolebinding", "oncall-viewer", "--clusterrole=provider-health-exporter-viewer", "--user=oncall"); err != nil {
		t.Fatalf("bind the viewer role: %v\n%s", err, out)
	}
	asOncall := func(args ...string) (string, error) {
		return kube.Kubectl(t, nil, append(kube.ClusterFlags(t, env.KubeconfigFor("oncall")), args...)...)
	}
	// canI answers kubectl auth can-i as oncall: its last line (kubectl may warn before it).
	canI := func(args ...string) string {
		out, _ := asOncall(append([]string{"auth", "can-i"}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return strings.TrimSpace(lines[len(lines)-1])
	}
	for verb, want := range map[string]string{"get": "yes", "list": "yes", "watch": "yes", "create": "no", "delete": "no", "update": "no", "patch": "no"} {
		if got := canI(verb, "providerhealths.providerhealth.io"); got != want {
			t.Errorf("viewer: can-i %s providerhealths = %q, want %q", verb, got, want)
		}
	}
	if got := canI("update", "providerhealths.providerhealth.io", "--subresource=status"); got != "no" {
		t.Errorf("viewer: can-i update providerhealths/status = %q, want no", got)
	}
	if out, err := asOncall("get", "ph"); err != nil || !strings.Contains(out, "No resources found") {
		t.Errorf("viewer: kubectl get ph: %v\n%s", err, out)
	}
	// Aggregation is done by kube-controller-manager, which the test environment does not run:
	// check that the server's own "view" role selects the viewer role's labels.
	out, err = kubectl(nil, "get", "clusterrole", "view", "-o", "json")
	if err != nil {
		t.Fatalf("get clusterrole view: %v\n%s", err, out)
	}
	var view rbacv1.ClusterRole
	if err := yaml.Unmarshal([]byte(out), &view); err != nil {
		t.Fatal(err)
	}
	var viewerLabels map[string]string
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == "provider-health-exporter-viewer" {
			viewerLabels = o.GetLabels()
		}
	}
	aggregated := false
	if view.AggregationRule != nil {
		for _, s := range view.AggregationRule.ClusterRoleSelectors {
			if sel, err := metav1.LabelSelectorAsSelector(&s); err == nil && sel.Matches(labels.Set(viewerLabels)) {
				aggregated = true
			}
		}
	}
	if !aggregated {
		t.Errorf("the API server's view role (aggregation rule %+v) does not select the viewer role's labels %v", view.AggregationRule, viewerLabels)
	}
}

// checkShardAuthorization runs on the API server deploy/ was applied to. The API server's own
// authorizer (SubjectAccessReview) allows the exporter's ServiceAccount each of shardVerbs on
// Leases in its namespace, and none of them in another namespace or across all namespaces, nor
// a verb the shard does not use (watch). Then the shard's own code (package shard, its Membership), as
// that ServiceAccount, does its work with these rights: two replicas join and see each other,
// renew their Leases, and one leaves and deletes its Lease; in another namespace it cannot join.
func checkShardAuthorization(t *testing.T, env *kube.Env) {
	t.Helper()
	const namespace = "provider-health-exporter" // deploy/'s, where the Deployment and the Role are
	client, err := kubernetes.NewForConfig(env.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	allowedOn := func(verb, ns, group, resource string) bool {
		t.Helper()
		name := "provider-health-exporter-5d8f7c9b6-x2x4q" // a pod's name, which no rule of deploy/ names
		if verb == "list" {
			name = ""
		}
		sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: exporterServiceAccount, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: verb, Group: group, Resource: resource, Name: name,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview of %s %s in %q: %v", verb, resource, ns, err)
		}
		return sar.Status.Allowed
	}
	allowed := func(verb, ns string) bool { return allowedOn(verb, ns, "coordination.k8s.io", "leases") }
	for _, verb := range shardVerbs {
		if !allowed(verb, namespace) {
			t.Errorf("the ServiceAccount may not %s Leases in %s: the shard needs it", verb, namespace)
		}
		for _, other := range []string{"default", ""} { // "": all namespaces
			if allowed(verb, other) {
				t.Errorf("the ServiceAccount may %s Leases in namespace %q: the shard's rights are its own namespace's only", verb, other)
			}
		}
	}
	if allowed("watch", namespace) {
		t.Error("the ServiceAccount may watch Leases: the shard does not")
	}
	for _, verb := range shardPartVerbs {
		if !allowedOn(verb, namespace, "providerhealth.io", "providerhealthparts") {
			t.Errorf("the ServiceAccount may not %s ProviderHealthParts in %s: the shard needs it", verb, namespace)
		}
		if allowedOn(verb, "default", "providerhealth.io", "providerhealthparts") {
			t.Errorf("the ServiceAccount may %s ProviderHealthParts in namespace default: the shard's rights are its own namespace's only", verb)
		}
	}
	for _, other := range []struct{ group, resource string }{{"", "configmaps"}, {"", "secrets"}, {"", "pods"}} {
		if allowedOn("get", namespace, other.group, other.resource) {
			t.Errorf("the ServiceAccount may get %s in %s: the shard's rights reach no other kind", other.resource, namespace)
		}
	}

	// The shard's requests as the ServiceAccount (a token user of its name and groups).
	env.AddUser(exporterServiceAccount, groups[:2]...)
	saConfig := env.ConfigFor(exporterServiceAccount)
	member := func(ns, identity string) *shard.Membership {
		t.Helper()
		m, err := shard.NewMembership(shard.MembershipOptions{Config: saConfig, Namespace: ns, Identity: identity, Instance: crdwriter.DefaultInstance,
			LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second,
			Part: func() shard.Publication {
				return shard.Publication{Data: []byte("verdicts of " + identity), Verdicts: 1, CheckedAt: time.Now(), Key: "k"}
			},
			OnParts: func([]shard.Part) {}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := member(namespace, "phe-a"), member(namespace, "phe-b")
	for _, m := range []*shard.Membership{a, b} {
		if err := m.Join(ctx); err != nil {
			t.Fatalf("%s joins the shard as the ServiceAccount: %v", m.Identity(), err)
		}
	}
	leases := client.CoordinationV1().Leases(namespace)
	first, err := leases.Get(ctx, "phe-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Lease of phe-a after its join: %v", err)
	}
	// Both run from here: a member that joined and stopped renewing would leave the other's
	// view a lease duration later, however loaded the machine.
	runCtx, stop := context.WithCancel(ctx)
	done, doneB := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); a.Run(runCtx) }()
	go func() { defer close(doneB); b.Run(runCtx) }()
	testutil.Eventually(t, 30*time.Second, "phe-a to see both members and renew its Lease", func() bool {
		l, err := leases.Get(ctx, "phe-a", metav1.GetOptions{})
		return slices.Equal(a.Members(), []string{"phe-a", "phe-b"}) && err == nil && l.Spec.RenewTime.After(first.Spec.RenewTime.Time)
	})
	// Its part is written as the ServiceAccount, and read by the others through a watch.
	testutil.Eventually(t, 30*time.Second, "phe-b to read phe-a's part", func() bool {
		for _, p := range b.Parts() {
			if p.Identity == "phe-a" && string(p.Data) == "verdicts of phe-a" {
				return true
			}
		}
		return false
	})
	stop()
	<-done
	<-doneB
	// Leaving releases the Lease (update: its holder cleared), and the exit deletes it.
	if err := a.Release(ctx); err != nil {
		t.Errorf("phe-a releases its Lease as the ServiceAccount: %v", err)
	}
	if l, err := leases.Get(ctx, "phe-a", metav1.GetOptions{}); err != nil || l.Spec.HolderIdentity != nil {
		t.Errorf("phe-a left the shard, its Lease: %v, err %v; want it released", l, err)
	}
	a.Delete(ctx)
	if _, err := leases.Get(ctx, "phe-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("phe-a deleted its Lease: %v; want it gone", err)
	}
	if err := member("default", "phe-c").Join(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("a replica joining in namespace default as the ServiceAccount: %v, want Forbidden", err)
	}
	if err := leases.Delete(ctx, "phe-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSystemdUnit: the example unit of docs/deploy.md loads without a warning in the machine's
// systemd (systemd-analyze verify, the binary path swapped for one that exists here), and its
// sandboxing keeps systemd's exposure score low (systemd-analyze security, offline).
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Unavailable(t, "no systemd-analyze on PATH: install Debian's systemd package")
	}
	raw, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "deploy", "systemd", "provider-health-exporter.service"))
	if err != nil {
		t.Fatal(err)
	}
	const binary = "/usr/local/bin/provider_health_exporter"
	if !bytes.Contains(raw, []byte("ExecStart="+binary+" ")) {
		t.Fatalf("the unit does not start %s", binary)
	}
	unit := filepath.Join(t.TempDir(), "provider-health-exporter.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(raw, []byte(binary), []byte("/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || strings.Contains(string(out), unit) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=20", "--no-pager", unit).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	if score, _ := strconv.ParseFloat(string(m[1]), 64); score > 2 {
		t.Errorf("exposure level %.1f, want at most 2 (of 10):\n%s", score, out)
	}
}

// TestPrometheusRuleFromMixin: deploy/prometheusrule.yaml is what `make deploy-rules` generates
// from the mixin's jsonnet now (no drift), and holds exactly the groups of the mixin's own
// generated rule files, mixin/prometheus_rules.yaml and mixin/prometheus_alerts.yaml.
func TestPrometheusRuleFromMixin(t *testing.T) {
	root := testutil.RepoRoot(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(t, "no go command to run jsonnet from the tools module: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The command of `make deploy-rules`.
	cmd := exec.CommandContext(ctx, goTool, "tool", "-modfile=tools/go.mod", "jsonnet", "-J", "mixin", "-S", "deploy/prometheusrule.jsonnet")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	generated, err := cmd.Output()
	if err != nil {
		t.Fatalf("jsonnet deploy/prometheusrule.jsonnet: %v\n%s", err, stderr.String())
	}
	committed, err := os.ReadFile(filepath.Join(root, "deploy", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, committed) {
		t.Errorf("deploy/prometheusrule.yaml differs from what the mixin generates: run make deploy-rules\n--- generated:\n%.3000s", generated)
	}

	var rule struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(committed, &rule); err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, f := range []string{"prometheus_rules.yaml", "prometheus_alerts.yaml"} {
		var doc struct {
			Groups []any `json:"groups"`
		}
		raw, err := os.ReadFile(filepath.Join(root, "mixin", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("mixin/%s: %v", f, err)
		}
		want = append(want, doc.Groups...)
	}
	got, _ := yaml.Marshal(rule.Spec.Groups)
	wantYAML, _ := yaml.Marshal(want)
	if rule.Kind != "PrometheusRule" || rule.Metadata.Namespace != "provider-health-exporter" || len(want) == 0 || !bytes.Equal(got, wantYAML) {
		t.Errorf("the PrometheusRule (%s in %q) does not hold the groups of mixin/prometheus_rules.yaml and mixin/prometheus_alerts.yaml:\n%s\nwant:\n%s", rule.Kind, rule.Metadata.Namespace, got, wantYAML)
	}
	if !bytes.Contains(committed, []byte("alert: \"ProviderHealthTargetDown\"")) {
		t.Error("the PrometheusRule has no ProviderHealthTargetDown alert")
	}
}
