package charts

import (
	"encoding/base64"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// kustomize renders deploy/ with the machine's kubectl, the way docs/deploy.md installs it.
func kustomize(t *testing.T) objects {
	t.Helper()
	out, err := kube.Kubectl(t, nil, "kustomize", filepath.Join(testutil.RepoRoot(t), "deploy"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/: %v\n%s", err, out)
	}
	return kube.DecodeObjects(t, []byte(out))
}

// monitoringKinds are the Prometheus Operator's objects, off by default, and the NetworkPolicy.
var monitoringKinds = []string{"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig", "NetworkPolicy"}

// TestTemplateDefaults: the default rendering holds the exporter's objects, sharded (the flag,
// POD_NAME, the shard's Role), and none of the Prometheus Operator's (whose CRDs may not be
// installed) nor the NetworkPolicy; every object
// is in the release's namespace (but the Events Role, in default) and carries the chart's labels.
func TestTemplateDefaults(t *testing.T) {
	h := newHelm(t)
	objs := objects(kube.DecodeObjects(t, h.template()))
	want := []string{
		"ClusterRole/provider-health-exporter", "ClusterRole/provider-health-exporter-viewer",
		"ClusterRoleBinding/provider-health-exporter", "ConfigMap/provider-health-exporter-providers",
		"CustomResourceDefinition/providerhealthparts.providerhealth.io",
		"CustomResourceDefinition/providerhealths.providerhealth.io",
		"Deployment/provider-health-exporter", "PodDisruptionBudget/provider-health-exporter",
		"Role/provider-health-exporter-events", "Role/provider-health-exporter-leader-election",
		"Role/provider-health-exporter-shard",
		"RoleBinding/provider-health-exporter-events", "RoleBinding/provider-health-exporter-leader-election",
		"RoleBinding/provider-health-exporter-shard",
		"Service/provider-health-exporter", "ServiceAccount/provider-health-exporter",
	}
	if got := objs.kinds(); !slices.Equal(got, want) {
		t.Errorf("the default rendering holds\n%v\nwant\n%v", got, want)
	}
	crd := objs.get(t, "CustomResourceDefinition", "", "providerhealths.providerhealth.io")
	if p := crd.GetAnnotations()["helm.sh/resource-policy"]; p != "keep" {
		t.Errorf("the CRD's helm.sh/resource-policy is %q, want keep (helm uninstall must leave the objects)", p)
	}
	for _, o := range objs {
		l := o.GetLabels()
		if l["app.kubernetes.io/name"] != "provider-health-exporter" || l["app.kubernetes.io/instance"] != release ||
			l["app.kubernetes.io/managed-by"] != "Helm" || !strings.HasPrefix(l["helm.sh/chart"], "provider-health-exporter-") {
			t.Errorf("%s/%s lacks the chart's labels: %v", o.GetKind(), o.GetName(), l)
		}
		ns := o.GetNamespace()
		switch {
		case strings.HasPrefix(o.GetKind(), "Cluster") || o.GetKind() == "CustomResourceDefinition":
			if ns != "" {
				t.Errorf("cluster-scoped %s/%s has namespace %q", o.GetKind(), o.GetName(), ns)
			}
		case strings.HasSuffix(o.GetName(), "-events"):
			if ns != "default" {
				t.Errorf("%s/%s is in %q: Events about a cluster-scoped object are stored in default", o.GetKind(), o.GetName(), ns)
			}
		case ns != namespace:
			t.Errorf("%s/%s is in %q, not the release's namespace %q", o.GetKind(), o.GetName(), ns, namespace)
		}
	}
	dep := objs.get(t, "Deployment", namespace, release)
	// Sharded by default: the flag, each replica's identity from its pod's name, and the Role
	// on the namespace's Leases bound to the ServiceAccount.
	checkSharded(t, objs, true)
	if img := field(dep, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["image"]; img != "ghcr.io/provider-health-exporter/provider-health-exporter:v"+chartAppVersion(t) {
		t.Errorf("the default image is %v, want ghcr.io/provider-health-exporter/provider-health-exporter:v<appVersion>", img)
	}
	// The inline providers file by default: no providers, a file the exporter accepts.
	cm := objs.get(t, "ConfigMap", namespace, release+"-providers")
	data, _ := field(cm, "data", "providers.yml").(string)
	if cfg, err := config.Parse("/etc/phe/config/providers.yml", []byte(data)); err != nil || len(cfg.Providers) != 0 {
		t.Errorf("the default providers file %q: %v (providers %v)", data, err, cfg)
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, filepath.Join(chartDir(t), "Chart.yaml"))), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("Chart.yaml has no appVersion")
	return ""
}

// checkPodIdentity: the container's POD_NAME and POD_UID come from the downward API's
// metadata.name and metadata.uid (on), or are not set (off). The shard's Leases are named after
// the pod; the writer's Lease is owned by the pod that holds it, so it goes with the release.
func checkPodIdentity(t *testing.T, objs objects, on bool) {
	t.Helper()
	ctr, _ := container(t, objs)
	got := map[string]any{}
	for _, e := range asList(ctr["env"]) {
		if n := e.(map[string]any)["name"]; n == "POD_NAME" || n == "POD_UID" {
			got[n.(string)] = e.(map[string]any)["valueFrom"]
		}
	}
	want := map[string]any{}
	if on {
		want = map[string]any{
			"POD_NAME": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}},
			"POD_UID":  map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.uid"}},
		}
	}
	if asYAML(t, got) != asYAML(t, want) {
		t.Errorf("POD_NAME and POD_UID are %s, want %s", asYAML(t, got), asYAML(t, want))
	}
}

// checkSharded: with sharding on, the Deployment passes --shard.enabled and sets POD_NAME from
// the pod's metadata.name (checkPodIdentity), and the Role <release>-shard grants get, list, create, update, patch
// and delete on Leases in the release's namespace, bound to the pods' ServiceAccount; with it off,
// none of these.
func checkSharded(t *testing.T, objs objects, on bool) {
	t.Helper()
	ctr, pod := container(t, objs)
	args, _ := ctr["args"].([]any)
	role, binding := objs.find("Role", namespace, release+"-shard"), objs.find("RoleBinding", namespace, release+"-shard")
	if !on {
		if slices.Contains(args, any("--shard.enabled")) || role != nil || binding != nil {
			t.Errorf("sharding off: args %v, Role %v, RoleBinding %v; want none of them", args, role != nil, binding != nil)
		}
		return
	}
	if !slices.Contains(args, any("--shard.enabled")) {
		t.Errorf("args %v lack --shard.enabled", args)
	}
	checkPodIdentity(t, objs, true)
	if role == nil || binding == nil {
		t.Fatalf("sharding on, the shard's Role (%v) or RoleBinding (%v) is missing: %v", role != nil, binding != nil, objs.kinds())
	}
	wantRules := []map[string]any{{"apiGroups": []string{"coordination.k8s.io"}, "resources": []string{"leases"},
		"verbs": []string{"get", "list", "create", "update", "delete"}},
		{"apiGroups": []string{"providerhealth.io"}, "resources": []string{"providerhealthparts"},
			"verbs": []string{"get", "list", "watch", "create", "update", "delete"}}}
	if got := asYAML(t, field(role, "rules")); got != asYAML(t, wantRules) {
		t.Errorf("the shard Role's rules\n%s\nwant exactly\n%s", got, asYAML(t, wantRules))
	}
	wantSubjects := []map[string]any{{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}}
	if asYAML(t, field(binding, "subjects")) != asYAML(t, wantSubjects) || field(binding, "roleRef", "name") != role.GetName() || field(binding, "roleRef", "kind") != "Role" {
		t.Errorf("the shard RoleBinding binds %v to %v, want the Role %s to the pods' ServiceAccount", field(binding, "roleRef"), field(binding, "subjects"), role.GetName())
	}
	for _, cr := range objs.all("ClusterRole") {
		if strings.Contains(asYAML(t, field(cr, "rules")), "leases") {
			t.Errorf("ClusterRole %s grants rights on Leases: the shard's are the namespace's only", cr.GetName())
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestTemplateMatchesKustomize: where the chart's default rendering and kustomize's rendering
// of deploy/ overlap they agree, object by object: the Deployment's replicas, rollout, args,
// env, ports, probes, resources, security contexts, ServiceAccount, mounts and Secret volumes; the
// RBAC rules, role references and subjects (the shard's Role too); the Service's ports; the PodDisruptionBudget. With
// the monitoring toggles on, the ServiceMonitor's endpoints, the PrometheusRule's and the
// AlertmanagerConfig's specs and the NetworkPolicy's rules agree too.
func TestTemplateMatchesKustomize(t *testing.T) {
	h := newHelm(t)
	k := kustomize(t)
	c := objects(kube.DecodeObjects(t, h.template("--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
		"--set", "alertmanagerConfig.enabled=true", "--set", "networkPolicy.enabled=true")))

	same := func(what string, got, want any) {
		t.Helper()
		if g, w := asYAML(t, got), asYAML(t, want); g != w || want == nil {
			t.Errorf("%s: the chart renders\n%s\nkustomize renders\n%s", what, g, w)
		}
	}

	// The Deployment.
	kd := k.get(t, "Deployment", namespace, "provider-health-exporter")
	cd := c.get(t, "Deployment", namespace, "provider-health-exporter")
	for _, p := range [][]string{
		{"spec", "replicas"}, {"spec", "strategy"},
		{"spec", "template", "spec", "serviceAccountName"}, {"spec", "template", "spec", "securityContext"},
	} {
		same("Deployment "+strings.Join(p, "."), field(cd, p...), field(kd, p...))
	}
	kc := field(kd, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	cc := field(cd, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	// The image too: both default to the project's published image at the exporter's version.
	for _, f := range []string{"name", "image", "args", "env", "ports", "readinessProbe", "livenessProbe", "resources", "securityContext"} {
		same("container "+f, cc[f], kc[f])
	}
	// Every mount and Secret volume of deploy/ is the chart's too (and every type's Secret is
	// both's: types_test.go); the config volume is a ConfigMap in both, named differently
	// (kustomize adds a hash).
	cMounts := map[string]any{}
	for _, m := range cc["volumeMounts"].([]any) {
		cMounts[m.(map[string]any)["name"].(string)] = m
	}
	for _, m := range kc["volumeMounts"].([]any) {
		same("volume mount "+m.(map[string]any)["name"].(string), cMounts[m.(map[string]any)["name"].(string)], m)
	}
	cVols := map[string]map[string]any{}
	for _, v := range field(cd, "spec", "template", "spec", "volumes").([]any) {
		cVols[v.(map[string]any)["name"].(string)] = v.(map[string]any)
	}
	for _, v := range field(kd, "spec", "template", "spec", "volumes").([]any) {
		v := v.(map[string]any)
		name := v["name"].(string)
		if name == "config" {
			if cVols[name]["configMap"] == nil || v["configMap"] == nil {
				t.Errorf("the config volume is not a ConfigMap in both: chart %v, kustomize %v", cVols[name], v)
			}
			continue
		}
		same("volume "+name, cVols[name], v)
	}
	// The spread over nodes, but for the selector (the chart's pods carry the release's label too).
	kts := field(kd, "spec", "template", "spec", "topologySpreadConstraints").([]any)[0].(map[string]any)
	cts := field(cd, "spec", "template", "spec", "topologySpreadConstraints").([]any)[0].(map[string]any)
	for _, f := range []string{"maxSkew", "topologyKey", "whenUnsatisfiable"} {
		same("topologySpreadConstraints "+f, cts[f], kts[f])
	}

	// RBAC: every Role and ClusterRole of deploy/ with the same rules, every binding with the
	// same role and subjects; the chart renders no other.
	for _, kind := range []string{"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"} {
		var kNames, cNames []string
		for _, o := range k.all(kind) {
			kNames = append(kNames, o.GetNamespace()+"/"+o.GetName())
			co := c.get(t, kind, o.GetNamespace(), o.GetName())
			if strings.HasSuffix(kind, "Binding") {
				same(kind+" "+o.GetName()+" roleRef", field(co, "roleRef"), field(o, "roleRef"))
				same(kind+" "+o.GetName()+" subjects", field(co, "subjects"), field(o, "subjects"))
			} else {
				same(kind+" "+o.GetName()+" rules", field(co, "rules"), field(o, "rules"))
			}
			if kind == "ClusterRole" && o.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"] != co.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"] {
				t.Errorf("ClusterRole %s: aggregate-to-view label %q, kustomize's %q", o.GetName(),
					co.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"], o.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"])
			}
		}
		for _, o := range c.all(kind) {
			cNames = append(cNames, o.GetNamespace()+"/"+o.GetName())
		}
		slices.Sort(kNames)
		slices.Sort(cNames)
		if !slices.Equal(kNames, cNames) {
			t.Errorf("%s: the chart renders %v, kustomize %v", kind, cNames, kNames)
		}
	}
	c.get(t, "ServiceAccount", namespace, "provider-health-exporter")

	same("Service ports", field(c.get(t, "Service", namespace, "provider-health-exporter"), "spec", "ports"),
		field(k.get(t, "Service", namespace, "provider-health-exporter"), "spec", "ports"))
	same("PodDisruptionBudget minAvailable", field(c.get(t, "PodDisruptionBudget", namespace, "provider-health-exporter"), "spec", "minAvailable"),
		field(k.get(t, "PodDisruptionBudget", namespace, "provider-health-exporter"), "spec", "minAvailable"))

	// The monitoring objects and the NetworkPolicy.
	same("ServiceMonitor endpoints", field(c.get(t, "ServiceMonitor", namespace, "provider-health-exporter"), "spec", "endpoints"),
		field(k.get(t, "ServiceMonitor", namespace, "provider-health-exporter"), "spec", "endpoints"))
	// The series get the Service's name as their job, as deploy/'s do (job_test.go checks the
	// rules follow other names).
	if jl := field(c.get(t, "ServiceMonitor", namespace, "provider-health-exporter"), "spec", "jobLabel"); jl != nil {
		t.Errorf("ServiceMonitor jobLabel = %v, want none (the job is the Service's name)", jl)
	}
	for _, kind := range []string{"PrometheusRule", "AlertmanagerConfig"} {
		same(kind+" spec", field(c.get(t, kind, namespace, "provider-health-exporter"), "spec"),
			field(k.get(t, kind, namespace, "provider-health-exporter"), "spec"))
	}
	kn := k.get(t, "NetworkPolicy", namespace, "provider-health-exporter")
	cn := c.get(t, "NetworkPolicy", namespace, "provider-health-exporter")
	same("NetworkPolicy policyTypes", field(cn, "spec", "policyTypes"), field(kn, "spec", "policyTypes"))
	same("NetworkPolicy ingress", field(cn, "spec", "ingress"), field(kn, "spec", "ingress"))
	// Each selector picks the release's pods.
	podLabels := field(cd, "spec", "template", "metadata", "labels").(map[string]any)
	for _, sel := range []struct {
		what string
		m    any
	}{
		{"Deployment selector", field(cd, "spec", "selector", "matchLabels")},
		{"Service selector", field(c.get(t, "Service", namespace, release), "spec", "selector")},
		{"PodDisruptionBudget selector", field(c.get(t, "PodDisruptionBudget", namespace, release), "spec", "selector", "matchLabels")},
		{"NetworkPolicy podSelector", field(cn, "spec", "podSelector", "matchLabels")},
		{"topologySpreadConstraints selector", cts["labelSelector"].(map[string]any)["matchLabels"]},
	} {
		m, _ := sel.m.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s is empty", sel.what)
		}
		for k, v := range m {
			if podLabels[k] != v {
				t.Errorf("%s %v does not select the pods (labels %v)", sel.what, m, podLabels)
			}
		}
	}
	if got := field(c.get(t, "ServiceMonitor", namespace, release), "spec", "selector", "matchLabels").(map[string]any); !maps.EqualFunc(got,
		field(c.get(t, "Service", namespace, release), "spec", "selector").(map[string]any), func(a, b any) bool { return a == b }) {
		t.Errorf("the ServiceMonitor selects %v, not the Service's labels", got)
	}
}

// TestTemplateEveryToggle renders testdata/every-toggle.yaml: the four monitoring and network
// objects are there with their extra labels; the inline providers file is one the exporter
// accepts and every file it names is a key of a Secret the chart creates and mounts at that
// path, readable by the group only; no ConfigMap holds a credential; another instance's name
// moves the Lease the Role grants; a change of a credential rolls the pods.
func TestTemplateEveryToggle(t *testing.T) {
	h := newHelm(t)
	rendered := h.template("-f", everyToggle(t))
	objs := objects(kube.DecodeObjects(t, rendered))
	if objs.find("ConfigMap", namespace, release+"-dashboards") == nil {
		t.Errorf("no dashboards ConfigMap with every toggle on: %v", objs.kinds())
	}
	for _, kind := range monitoringKinds {
		if len(objs.all(kind)) != 1 {
			t.Errorf("want one %s with every toggle on, found %d", kind, len(objs.all(kind)))
		}
	}
	if l := objs.get(t, "ServiceMonitor", namespace, release).GetLabels(); l["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.additionalLabels", l)
	}
	if l := objs.get(t, "AlertmanagerConfig", namespace, release).GetLabels(); l["alertmanagerConfig"] != "main" {
		t.Errorf("AlertmanagerConfig labels %v lack alertmanagerConfig.additionalLabels", l)
	}

	dep := objs.get(t, "Deployment", namespace, release)
	pod := field(dep, "spec", "template", "spec").(map[string]any)
	ctr := pod["containers"].([]any)[0].(map[string]any)
	args := ctr["args"].([]any)
	for _, want := range []string{"--crd.enabled", "--crd.leader-elect", "--crd.instance=site-a", "--provider-check-interval=30s",
		"--shard.enabled", "--shard.lease-duration=20s", "--shard.renew-deadline=5s", "--shard.retry-period=3s"} {
		if !slices.Contains(args, any(want)) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	lease := objs.get(t, "Role", namespace, release+"-leader-election")
	if names := field(lease, "rules").([]any)[1].(map[string]any)["resourceNames"]; asYAML(t, names) != asYAML(t, []string{"site-a"}) {
		t.Errorf("the leader-election Role grants the Leases %v, want the instance's, site-a", names)
	}

	// Mount path -> volume.
	vols := map[string]map[string]any{}
	for _, v := range pod["volumes"].([]any) {
		vols[v.(map[string]any)["name"].(string)] = v.(map[string]any)
	}
	mounts := map[string]map[string]any{}
	for _, m := range ctr["volumeMounts"].([]any) {
		m := m.(map[string]any)
		if m["readOnly"] != true {
			t.Errorf("volume %v is mounted writable", m["name"])
		}
		mounts[m["mountPath"].(string)] = vols[m["name"].(string)]
	}
	cfgVol := mounts["/etc/phe/config"]
	cm := objs.get(t, "ConfigMap", namespace, cfgVol["configMap"].(map[string]any)["name"].(string))
	data := field(cm, "data", "providers.yml").(string)
	if !slices.Contains(args, any("--config.file=/etc/phe/config/providers.yml")) {
		t.Errorf("args %v do not name the mounted providers file", args)
	}
	cfg, err := config.Parse("/etc/phe/config/providers.yml", []byte(data))
	if err != nil {
		t.Fatalf("the rendered providers file: %v\n%s", err, data)
	}
	types := map[string]bool{}
	for _, p := range cfg.Providers {
		types[p.Type] = true
		for _, f := range p.Block.Files() {
			if f.Path == "" {
				continue
			}
			v := mounts[filepath.Dir(f.Path)]
			sec, _ := v["secret"].(map[string]any)
			if sec == nil {
				t.Errorf("provider %s names %s, which is in no mounted Secret", p.Name, f.Path)
				continue
			}
			if mode, _ := sec["defaultMode"].(float64); int(mode)&0o007 != 0 || mode == 0 {
				t.Errorf("Secret volume %v is readable by others (defaultMode %v)", v["name"], sec["defaultMode"])
			}
			s := objs.get(t, "Secret", namespace, sec["secretName"].(string))
			content, _ := field(s, "data", filepath.Base(f.Path)).(string)
			if raw, err := base64.StdEncoding.DecodeString(content); err != nil || len(raw) == 0 {
				t.Errorf("provider %s names %s: Secret %s has no key %s", p.Name, f.Path, s.GetName(), filepath.Base(f.Path))
			}
		}
	}
	if len(types) != 4 {
		t.Errorf("testdata/every-toggle.yaml covers the types %v, want all four", types)
	}
	// No credential in a ConfigMap, in plain text or base64, nor in the Deployment.
	for _, secret := range []string{"FAKE-SSH-PRIVATE-KEY", "FAKE-HOST-KEY", "FAKE-GCP-KEY", "FAKE-VSPHERE-USER", "FAKE-VSPHERE-PASSWORD", "FAKE-VSPHERE-CA", "FAKE-KUBECONFIG"} {
		for _, o := range objs {
			if o.GetKind() == "Secret" {
				continue
			}
			if s := asYAML(t, o.Object); strings.Contains(s, secret) {
				t.Errorf("%s/%s holds the credential %s: credentials belong in Secrets", o.GetKind(), o.GetName(), secret)
			}
		}
	}
	if n := len(objs.all("Secret")); n != 5 {
		t.Errorf("want the four credentials Secrets and the web config's, found %d", n)
	}

	// A new credential rolls the pods (the exporter reads credentials when it loads the file).
	other := objects(kube.DecodeObjects(t, h.template("-f", everyToggle(t), "--set", "credentials.ssh.knownHosts=changed")))
	annotation := func(o *unstructured.Unstructured) any {
		return field(o, "spec", "template", "metadata", "annotations", "checksum/credentials")
	}
	if a, b := annotation(objs.get(t, "Deployment", namespace, release)), annotation(other.get(t, "Deployment", namespace, release)); a == nil || a == b {
		t.Errorf("the pod template's checksum/credentials did not change with a credential (%v, %v)", a, b)
	}
}

// TestTemplateChoices: the other branches of the values: an existing ConfigMap or Secret for
// the providers file, existing credentials Secrets, one replica (no PodDisruptionBudget), the
// writer off (no writer RBAC, no --crd flags), sharding off (no flag, no POD_NAME, no shard
// Role), and the refusals of contradicting values.
func TestTemplateChoices(t *testing.T) {
	h := newHelm(t)
	volumes := func(objs objects) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, v := range field(objs.get(t, "Deployment", namespace, release), "spec", "template", "spec", "volumes").([]any) {
			out[v.(map[string]any)["name"].(string)] = v.(map[string]any)
		}
		return out
	}

	objs := objects(kube.DecodeObjects(t, h.template("--set", "config.existingConfigMap=my-providers", "--set", "config.key=phe.yml")))
	if len(objs.all("ConfigMap")) != 0 {
		t.Errorf("with config.existingConfigMap the chart renders a ConfigMap: %v", objs.kinds())
	}
	if got := asYAML(t, volumes(objs)["config"]["configMap"]); got != asYAML(t, map[string]any{"name": "my-providers"}) {
		t.Errorf("config volume %s, want the ConfigMap my-providers", got)
	}
	if args := field(objs.get(t, "Deployment", namespace, release), "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["args"].([]any); args[0] != "--config.file=/etc/phe/config/phe.yml" {
		t.Errorf("args %v do not name config.key", args)
	}

	objs = objects(kube.DecodeObjects(t, h.template("--set", "config.existingSecret=my-providers",
		"--set", "credentials.ssh.existingSecret=my-ssh", "--set", "credentials.vsphere.existingSecret=my-vcenter")))
	v := volumes(objs)
	if len(objs.all("ConfigMap")) != 0 || len(objs.all("Secret")) != 0 ||
		asYAML(t, v["config"]["secret"]) != asYAML(t, map[string]any{"secretName": "my-providers", "defaultMode": 0o440}) {
		t.Errorf("with config.existingSecret: objects %v, config volume %v", objs.kinds(), v["config"])
	}
	for name, secret := range map[string]string{"ssh": "my-ssh", "vsphere": "my-vcenter", "gcp": release + "-gcp"} {
		if got := v[name]["secret"].(map[string]any)["secretName"]; got != secret {
			t.Errorf("volume %s mounts Secret %v, want %s", name, got, secret)
		}
	}

	// Sharding off: no flag, no shard Role; the writer's RBAC stays, and so do POD_NAME and
	// POD_UID (the holder's pod owns the writer's Lease). Without leader election, neither.
	objs = objects(kube.DecodeObjects(t, h.template("--set", "shard.enabled=false")))
	checkSharded(t, objs, false)
	checkPodIdentity(t, objs, true)
	checkPodIdentity(t, objects(kube.DecodeObjects(t, h.template("--set", "shard.enabled=false", "--set", "crd.leaderElect=false"))), false)
	if objs.find("Role", namespace, release+"-leader-election") == nil {
		t.Errorf("shard.enabled=false lost the writer's Lease Role: %v", objs.kinds())
	}
	// The writer off, sharding on: the shard's Role is the only Role.
	objs = objects(kube.DecodeObjects(t, h.template("--set", "crd.enabled=false")))
	checkSharded(t, objs, true)
	if got := objs.kinds(); slices.ContainsFunc(got, func(s string) bool {
		return strings.Contains(s, "Role") && s != "ClusterRole/provider-health-exporter-viewer" && !strings.HasSuffix(s, "/provider-health-exporter-shard")
	}) {
		t.Errorf("crd.enabled=false still renders the writer's RBAC: %v", got)
	}

	objs = objects(kube.DecodeObjects(t, h.template("--set", "replicas=1", "--set", "crd.enabled=false", "--set", "shard.enabled=false")))
	if len(objs.all("PodDisruptionBudget")) != 0 {
		t.Error("one replica: a PodDisruptionBudget with minAvailable 1 would block every drain, yet it is rendered")
	}
	args := field(objs.get(t, "Deployment", namespace, release), "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["args"].([]any)
	if asYAML(t, args) != asYAML(t, []string{"--config.file=/etc/phe/config/providers.yml", "--web.listen-address=:9847", "--config.auto-reload"}) {
		t.Errorf("crd.enabled=false, shard.enabled=false: args %v", args)
	}
	if got := objs.kinds(); slices.ContainsFunc(got, func(s string) bool {
		return strings.Contains(s, "Role") && s != "ClusterRole/provider-health-exporter-viewer"
	}) {
		t.Errorf("crd.enabled=false still renders the writer's RBAC: %v", got)
	}

	for set, want := range map[string]string{
		"config.existingConfigMap=a,config.existingSecret=b":                              "set at most one of config.providers",
		"credentials.gcp.existingSecret=a,credentials.gcp.key=FAKE":                       "credentials.gcp: set either existingSecret",
		"config.providers[0].name=a,config.providers[0].type=kvm,config.existingSecret=b": "set at most one of config.providers",
	} {
		out, err := h.run("template", release, chartDir(t), "--set", set)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("helm template --set %s: err %v, want an error saying %q:\n%s", set, err, want, out)
		}
	}
}

// TestServiceAccountTokenOnlyWhenNeeded: the pod mounts its ServiceAccount token only when a
// feature uses it (the writer, the shard, an in-cluster kubernetes provider, a providers file
// the chart cannot read, extraArgs turning the writer or the shard on), or when
// serviceAccount.automountToken says so.
func TestServiceAccountTokenOnlyWhenNeeded(t *testing.T) {
	h := newHelm(t)
	off := []string{"--set", "crd.enabled=false", "--set", "shard.enabled=false"}
	kvm := []string{"--set", "config.providers[0].name=lab", "--set", "config.providers[0].type=kvm"}
	kubeProvider := func(kubeconfig string) []string {
		args := []string{"--set", "config.providers[0].name=c", "--set", "config.providers[0].type=kubernetes"}
		if kubeconfig != "" {
			args = append(args, "--set", "config.providers[0].kubernetes.kubeconfig="+kubeconfig)
		}
		return args
	}
	join := func(parts ...[]string) []string { return slices.Concat(parts...) }
	for _, c := range []struct {
		name string
		args []string
		want bool
	}{
		{"defaults (writer and shard)", nil, true},
		{"writer only", []string{"--set", "shard.enabled=false"}, true},
		{"shard only", []string{"--set", "crd.enabled=false"}, true},
		{"neither, kvm provider", join(off, kvm), false},
		{"neither, no provider", off, false},
		{"neither, in-cluster kubernetes provider", join(off, kubeProvider("")), true},
		{"neither, kubernetes provider with a kubeconfig", join(off, kubeProvider("/etc/phe/kubeconfigs/c")), false},
		{"neither, kubeconfig at the token's path", join(off, kubeProvider("/var/run/secrets/kubernetes.io/serviceaccount/kubeconfig")), true},
		{"neither, existingConfigMap", join(off, []string{"--set", "config.existingConfigMap=mine"}), true},
		{"neither, extraArgs --crd.enabled", join(off, []string{"--set", "extraArgs[0]=--crd.enabled"}), true},
		{"neither, forced on", join(off, kvm, []string{"--set", "serviceAccount.automountToken=true"}), true},
		{"defaults, forced off", []string{"--set", "serviceAccount.automountToken=false"}, false},
	} {
		objs := objects(kube.DecodeObjects(t, h.template(c.args...)))
		got := field(objs.get(t, "Deployment", namespace, release), "spec", "template", "spec", "automountServiceAccountToken")
		if got != c.want {
			t.Errorf("%s: automountServiceAccountToken %v, want %v", c.name, got, c.want)
		}
	}
}
