package charts

import (
	"encoding/base64"
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/cluster"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// container returns the exporter's container and the pod spec of a rendering's Deployment.
func container(t *testing.T, objs objects) (map[string]any, map[string]any) {
	t.Helper()
	pod := field(objs.get(t, "Deployment", namespace, release), "spec", "template", "spec").(map[string]any)
	return pod["containers"].([]any)[0].(map[string]any), pod
}

// TestTemplateImage: the image is registry/repository, then @digest when one is set (whatever the
// tag), else :tag, by default the project's public image at "v" followed by the appVersion.
func TestTemplateImage(t *testing.T) {
	h := newHelm(t)
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "ghcr.io/provider-health-exporter/provider-health-exporter:v" + chartAppVersion(t)},
		{[]string{"--set", "image.tag=v9.9.9"}, "ghcr.io/provider-health-exporter/provider-health-exporter:v9.9.9"},
		{[]string{"--set", "image.registry=registry.example:5000", "--set", "image.repository=mirror/phe"}, "registry.example:5000/mirror/phe:v" + chartAppVersion(t)},
		{[]string{"--set", "image.registry=", "--set", "image.repository=phe"}, "phe:v" + chartAppVersion(t)},
		{[]string{"--set", "image.tag=v9.9.9", "--set", "image.digest=" + digest}, "ghcr.io/provider-health-exporter/provider-health-exporter@" + digest},
	} {
		ctr, _ := container(t, objects(kube.DecodeObjects(t, h.template(c.args...))))
		if ctr["image"] != c.want {
			t.Errorf("%v: image %v, want %s", c.args, ctr["image"], c.want)
		}
	}
	// make cluster loads the image under the name the chart runs with no image values.
	ctr, _ := container(t, objects(kube.DecodeObjects(t, h.template())))
	if ref, err := cluster.ChartImage(testutil.RepoRoot(t)); err != nil || ctr["image"] != ref {
		t.Errorf("the cluster loads the image as %q (%v), the chart runs %v", ref, err, ctr["image"])
	}
	for set, want := range map[string]string{
		"image.digest=latest":          "digest",
		"image.registry=ghcr.io/x":     "registry",
		"image.tag=v1:2":               "tag",
		"webConfig.config.tls_config=": "tls_config",
		"webConfig.scheme=https":       "scheme",
	} {
		out, err := h.run("template", release, chartDir(t), "--set", set)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("helm template --set %s: err %v, want the schema to refuse it naming %q:\n%s", set, err, want, out)
		}
	}
}

// TestTemplateExtras: extraEnv, extraEnvFrom, extraVolumes and extraVolumeMounts land in the pod
// beside the chart's own, and extraArgs after the chart's flags.
func TestTemplateExtras(t *testing.T) {
	h := newHelm(t)
	values := `
extraArgs: [--log.level=debug]
extraEnv:
  - name: HTTPS_PROXY
    value: http://proxy.example:3128
extraEnvFrom:
  - secretRef:
      name: proxy-env
extraVolumes:
  - name: corp-ca
    configMap:
      name: corp-ca
extraVolumeMounts:
  - name: corp-ca
    mountPath: /etc/ssl/corp
    readOnly: true
`
	ctr, pod := container(t, objects(kube.DecodeObjects(t, h.template("-f", writeValues(t, values)))))
	// The chart's POD_NAME and POD_UID (sharding and the writer's Lease, on by default) first,
	// then extraEnv.
	if got := asYAML(t, ctr["env"]); got != asYAML(t, []map[string]any{
		{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
		{"name": "POD_UID", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.uid"}}},
		{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"},
	}) {
		t.Errorf("env %s", got)
	}
	if got := asYAML(t, ctr["envFrom"]); !strings.Contains(got, "proxy-env") {
		t.Errorf("envFrom %s", got)
	}
	names := func(list any) []string {
		var out []string
		for _, x := range list.([]any) {
			out = append(out, x.(map[string]any)["name"].(string))
		}
		return out
	}
	if v := names(pod["volumes"]); !slices.Contains(v, "corp-ca") || !slices.Contains(v, "config") {
		t.Errorf("volumes %v: want the chart's and corp-ca", v)
	}
	if m := names(ctr["volumeMounts"]); !slices.Contains(m, "corp-ca") || !slices.Contains(m, "ssh") {
		t.Errorf("volume mounts %v: want the chart's and corp-ca", m)
	}
	if args := ctr["args"].([]any); args[len(args)-1] != "--log.level=debug" {
		t.Errorf("args %v do not end with extraArgs", args)
	}
}

// TestTemplateWebConfig: an inline web config becomes a Secret, mounted and passed as
// --web.config.file; with TLS the probes and the ServiceMonitor use HTTPS; with basic auth the
// probes send webConfig.probeBasicAuth, or fall back to tcpSocket without it; an existing Secret
// is mounted instead, with the scheme the values name; the ServiceMonitor's own scheme,
// tlsConfig, basicAuth and relabelings are rendered as given.
func TestTemplateWebConfig(t *testing.T) {
	h := newHelm(t)
	values := `
serviceMonitor:
  enabled: true
  tlsConfig:
    ca: {secret: {name: phe-tls, key: ca.crt}}
    serverName: phe
  basicAuth:
    username: {name: phe-scrape, key: username}
    password: {name: phe-scrape, key: password}
  relabelings:
    - targetLabel: team
      replacement: infra
  metricRelabelings:
    - action: drop
      sourceLabels: [__name__]
      regex: go_gc_.*
webConfig:
  config:
    tls_server_config:
      cert_file: /etc/phe/tls/tls.crt
      key_file: /etc/phe/tls/tls.key
    basic_auth_users:
      prometheus: "$2y$10$FAKEHASH"
  probeBasicAuth:
    username: kubelet
    password: probe-secret
`
	objs := objects(kube.DecodeObjects(t, h.template("-f", writeValues(t, values))))
	ctr, pod := container(t, objs)
	if !slices.Contains(ctr["args"].([]any), any("--web.config.file=/etc/phe/web/web-config.yml")) {
		t.Errorf("args %v lack --web.config.file", ctr["args"])
	}
	s := objs.get(t, "Secret", namespace, release+"-web-config")
	raw, _ := base64.StdEncoding.DecodeString(field(s, "data", "web-config.yml").(string))
	var wc map[string]any
	if err := yaml.Unmarshal(raw, &wc); err != nil || field2(wc, "tls_server_config", "cert_file") != "/etc/phe/tls/tls.crt" ||
		field2(wc, "basic_auth_users", "prometheus") != "$2y$10$FAKEHASH" {
		t.Errorf("the web config Secret holds %s (%v)", raw, err)
	}
	var mounted bool
	for _, v := range pod["volumes"].([]any) {
		if sec, _ := v.(map[string]any)["secret"].(map[string]any); sec != nil && sec["secretName"] == release+"-web-config" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the web config Secret is not a volume: %v", pod["volumes"])
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("kubelet:probe-secret"))
	for _, p := range []string{"readinessProbe", "livenessProbe"} {
		get := ctr[p].(map[string]any)["httpGet"].(map[string]any)
		if get["scheme"] != "HTTPS" || !strings.Contains(asYAML(t, get["httpHeaders"]), auth) {
			t.Errorf("%s %v: want HTTPS with the probe's credentials", p, get)
		}
	}
	ep := field(objs.get(t, "ServiceMonitor", namespace, release), "spec", "endpoints").([]any)[0].(map[string]any)
	if ep["scheme"] != "HTTPS" || field2(ep, "tlsConfig", "serverName") != "phe" ||
		field2(ep, "basicAuth", "username", "name") != "phe-scrape" ||
		!strings.Contains(asYAML(t, ep["relabelings"]), "infra") || !strings.Contains(asYAML(t, ep["metricRelabelings"]), "go_gc_") {
		t.Errorf("ServiceMonitor endpoint %s", asYAML(t, ep))
	}

	// Basic auth without probe credentials: tcpSocket probes of the same port.
	objs = objects(kube.DecodeObjects(t, h.template("--set", "webConfig.config.basic_auth_users.prometheus=x")))
	ctr, _ = container(t, objs)
	for _, p := range []string{"readinessProbe", "livenessProbe"} {
		pr := ctr[p].(map[string]any)
		if pr["httpGet"] != nil || field2(pr, "tcpSocket", "port") != "http-metrics" {
			t.Errorf("%s %v: want a tcpSocket probe of http-metrics", p, pr)
		}
	}

	// An existing Secret: mounted, no Secret rendered; the scheme and the ServiceMonitor's
	// own scheme as the values say.
	objs = objects(kube.DecodeObjects(t, h.template("--set", "webConfig.existingSecret=my-web", "--set", "webConfig.key=web.yml",
		"--set", "webConfig.scheme=HTTPS", "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.scheme=HTTP")))
	ctr, pod = container(t, objs)
	if objs.find("Secret", namespace, release+"-web-config") != nil || !slices.Contains(ctr["args"].([]any), any("--web.config.file=/etc/phe/web/web.yml")) ||
		!strings.Contains(asYAML(t, pod["volumes"]), "secretName: my-web") {
		t.Errorf("webConfig.existingSecret: objects %v, args %v, volumes %v", objs.kinds(), ctr["args"], pod["volumes"])
	}
	if s := field2(ctr["readinessProbe"].(map[string]any), "httpGet", "scheme"); s != "HTTPS" {
		t.Errorf("readiness probe scheme %v, want HTTPS (webConfig.scheme)", s)
	}
	if ep := field(objs.get(t, "ServiceMonitor", namespace, release), "spec", "endpoints").([]any)[0].(map[string]any); ep["scheme"] != nil {
		t.Errorf("serviceMonitor.scheme=HTTP: the endpoint's scheme is %v, want the default (none)", ep["scheme"])
	}

	// Without a web config: no flag, no Secret, probes of the default scheme (HTTP).
	ctr, _ = container(t, objects(kube.DecodeObjects(t, h.template())))
	if strings.Contains(asYAML(t, ctr["args"]), "web.config") || field2(ctr["readinessProbe"].(map[string]any), "httpGet", "scheme") != nil {
		t.Errorf("without a web config: args %v, readiness probe %v", ctr["args"], ctr["readinessProbe"])
	}
	if out, err := h.run("template", release, chartDir(t), "--set", "webConfig.existingSecret=a", "--set", "webConfig.config.basic_auth_users.x=y"); err == nil ||
		!strings.Contains(out, "webConfig: set either") {
		t.Errorf("webConfig.config with existingSecret: err %v\n%s", err, out)
	}
}

// field2 walks nested maps of a decoded document.
func field2(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// writeValues writes a values file for helm -f.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	p := t.TempDir() + "/values.yaml"
	if err := writeFile(p, values); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// TestTemplateExternalURL: web.externalURL and web.routePrefix become the exporter's flags, and
// the probes and the ServiceMonitor reach the endpoints under the route prefix the exporter
// derives: the external URL's path, unless routePrefix names another.
func TestTemplateExternalURL(t *testing.T) {
	h := newHelm(t)
	for _, c := range []struct {
		args   []string
		flags  []string
		prefix string
	}{
		{nil, nil, ""},
		{[]string{"--set", "web.externalURL=https://tools.example/phe/"}, []string{"--web.external-url=https://tools.example/phe/"}, "/phe"},
		{[]string{"--set", "web.externalURL=https://tools.example/phe", "--set", "web.routePrefix=/"},
			[]string{"--web.external-url=https://tools.example/phe", "--web.route-prefix=/"}, ""},
		{[]string{"--set", "web.routePrefix=/inner"}, []string{"--web.route-prefix=/inner"}, "/inner"},
	} {
		objs := objects(kube.DecodeObjects(t, h.template(append(c.args, "--set", "serviceMonitor.enabled=true")...)))
		ctr, _ := container(t, objs)
		var web []string
		for _, a := range ctr["args"].([]any) {
			if s := a.(string); strings.HasPrefix(s, "--web.external-url") || strings.HasPrefix(s, "--web.route-prefix") {
				web = append(web, s)
			}
		}
		if !slices.Equal(web, c.flags) {
			t.Errorf("%v: flags %v, want %v", c.args, web, c.flags)
		}
		if p := field2(ctr["readinessProbe"].(map[string]any), "httpGet", "path"); p != c.prefix+"/-/ready" {
			t.Errorf("%v: readiness probe path %v, want %s/-/ready", c.args, p, c.prefix)
		}
		if p := field2(ctr["livenessProbe"].(map[string]any), "httpGet", "path"); p != c.prefix+"/-/healthy" {
			t.Errorf("%v: liveness probe path %v, want %s/-/healthy", c.args, p, c.prefix)
		}
		ep := field(objs.get(t, "ServiceMonitor", namespace, release), "spec", "endpoints").([]any)[0].(map[string]any)
		if ep["path"] != c.prefix+"/metrics" {
			t.Errorf("%v: ServiceMonitor path %v, want %s/metrics", c.args, ep["path"], c.prefix)
		}
	}
	if out, err := h.run("template", release, chartDir(t), "--set", "web.externalURL=tools.example/phe"); err == nil || !strings.Contains(out, "externalURL") {
		t.Errorf("a URL without a scheme: err %v, want the schema to refuse it:\n%s", err, out)
	}
}

// TestTemplateServiceMonitorScheme: serviceMonitor.scheme takes what the ServiceMonitor CRD
// takes (http, https, HTTP, HTTPS) and hands it on as written; HTTP in either case is the
// endpoint's default and is left out. Anything else the schema refuses.
func TestTemplateServiceMonitorScheme(t *testing.T) {
	h := newHelm(t)
	for scheme, want := range map[string]any{"http": nil, "HTTP": nil, "https": "https", "HTTPS": "HTTPS"} {
		objs := objects(kube.DecodeObjects(t, h.template("--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.scheme="+scheme)))
		ep := field(objs.get(t, "ServiceMonitor", namespace, release), "spec", "endpoints").([]any)[0].(map[string]any)
		if ep["scheme"] != want {
			t.Errorf("serviceMonitor.scheme=%s: the endpoint's scheme is %v, want %v", scheme, ep["scheme"], want)
		}
	}
	if out, err := h.run("template", release, chartDir(t), "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.scheme=Https"); err == nil ||
		!strings.Contains(out, "scheme") {
		t.Errorf("serviceMonitor.scheme=Https: err %v, want the schema to refuse it naming scheme:\n%s", err, out)
	}
}

// TestTemplateConfigChangeReachesPods: a providers file the chart does not render
// (config.existingConfigMap, config.existingSecret) changes without the chart knowing, so no
// checksum of the chart's can roll the pods: the exporter runs with --config.auto-reload by
// default and loads the changed file itself. config.autoReload=false drops the flag, and then
// a podAnnotations entry the user sets (e.g. a checksum of their ConfigMap) rolls the pods
// when it changes.
func TestTemplateConfigChangeReachesPods(t *testing.T) {
	h := newHelm(t)
	for _, args := range [][]string{
		nil,
		{"--set", "config.existingConfigMap=my-providers"},
		{"--set", "config.existingSecret=my-providers"},
	} {
		ctr, _ := container(t, objects(kube.DecodeObjects(t, h.template(args...))))
		if !slices.Contains(ctr["args"].([]any), any("--config.auto-reload")) {
			t.Errorf("%v: args %v, want --config.auto-reload", args, ctr["args"])
		}
	}
	ctr, _ := container(t, objects(kube.DecodeObjects(t, h.template("--set", "config.existingConfigMap=my-providers", "--set", "config.autoReload=false"))))
	if slices.Contains(ctr["args"].([]any), any("--config.auto-reload")) {
		t.Errorf("config.autoReload=false: args %v, want no --config.auto-reload", ctr["args"])
	}
	podAnnotations := func(sum string) any {
		d := objects(kube.DecodeObjects(t, h.template("--set", "config.existingConfigMap=my-providers",
			"--set-string", "podAnnotations.checksum/my-providers="+sum))).get(t, "Deployment", namespace, release)
		return field(d, "spec", "template", "metadata", "annotations")
	}
	a, b := podAnnotations("1111"), podAnnotations("2222")
	if got := a.(map[string]any)["checksum/my-providers"]; got != "1111" || asYAML(t, a) == asYAML(t, b) {
		t.Errorf("podAnnotations: the pod template's annotations %v and %v, want the user's checksum in each, differing", a, b)
	}
}
