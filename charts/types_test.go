package charts

import (
	"encoding/base64"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

// chartTypes is the chart's files/types.yaml, which scripts/gentypes writes from each
// type's credentials.yaml (its own tests check that and a fixture type's rendering).
type chartTypes struct {
	Credentials []struct {
		Type      string `json:"type"`
		None      bool   `json:"none"`
		Secret    string `json:"secret"`
		MountPath string `json:"mountPath"`
		Keys      []struct {
			File  string `json:"file"`
			Value string `json:"value"`
		} `json:"keys"`
		Files *struct {
			Value   string `json:"value"`
			Example string `json:"example"`
		} `json:"files"`
	} `json:"credentials"`
}

// TestEveryTypeGetsItsCredentials: every provider type of the build (providers/) has its
// credentials Secret in files/types.yaml (or is marked none there: its providers name no
// file), and the chart renders for each Secret the one of the
// contents given in credentials.<secret>, an optional volume of it and a read-only mount at its
// mountPath; deploy/ mounts the same Secret at the same place; config.providers accepts a
// provider of every type and refuses another.
func TestEveryTypeGetsItsCredentials(t *testing.T) {
	var types chartTypes
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir(t), "files", "types.yaml")), &types); err != nil {
		t.Fatalf("files/types.yaml: %v", err)
	}
	var names []string
	for _, c := range types.Credentials {
		names = append(names, c.Type)
	}
	if !slices.Equal(names, config.TypeNames()) {
		t.Fatalf("files/types.yaml has the credentials of %v, the build's types are %v: run make generate", names, config.TypeNames())
	}

	args := []string{}
	want := map[string]map[string]string{} // Secret name to key to content
	for _, c := range types.Credentials {
		if c.None {
			continue
		}
		secret := map[string]string{}
		for _, k := range c.Keys {
			content := "FAKE-" + c.Type + "-" + k.File
			args = append(args, "--set", "credentials."+c.Secret+"."+k.Value+"="+content)
			secret[k.File] = content
		}
		if f := c.Files; f != nil {
			content := "FAKE-" + c.Type + "-" + f.Example
			args = append(args, "--set", "credentials."+c.Secret+"."+f.Value+"."+strings.ReplaceAll(f.Example, ".", `\.`)+"="+content)
			secret[f.Example] = content
		}
		want[release+"-"+c.Secret] = secret
	}
	for i, typ := range config.TypeNames() {
		args = append(args, "--set", "config.providers["+string(rune('0'+i))+"].name=p"+string(rune('0'+i)),
			"--set", "config.providers["+string(rune('0'+i))+"].type="+typ)
	}
	h := newHelm(t)
	objs := objects(kube.DecodeObjects(t, h.template(args...)))
	for _, s := range objs.all("Secret") {
		w, ok := want[s.GetName()]
		if !ok {
			t.Errorf("an unexpected Secret %s", s.GetName())
			continue
		}
		got := map[string]string{}
		for k, v := range field(s, "data").(map[string]any) {
			b, _ := base64.StdEncoding.DecodeString(v.(string))
			got[k] = string(b)
		}
		if asYAML(t, got) != asYAML(t, w) {
			t.Errorf("Secret %s holds %v, want %v", s.GetName(), got, w)
		}
		delete(want, s.GetName())
	}
	if len(want) > 0 {
		t.Errorf("no Secret rendered for %v", want)
	}

	k := kustomize(t)
	for name, dep := range map[string]objects{"the chart": objs, "deploy/": k} {
		d := dep.get(t, "Deployment", namespace, "provider-health-exporter")
		volumes := map[string]any{}
		for _, v := range field(d, "spec", "template", "spec", "volumes").([]any) {
			volumes[v.(map[string]any)["name"].(string)] = v
		}
		mounts := map[string]any{}
		for _, m := range field(d, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["volumeMounts"].([]any) {
			mounts[m.(map[string]any)["name"].(string)] = m
		}
		for _, c := range types.Credentials {
			if c.None {
				continue
			}
			wantVolume := map[string]any{"name": c.Secret, "secret": map[string]any{
				"secretName": "provider-health-exporter-" + c.Secret, "defaultMode": 0o440, "optional": true}}
			if asYAML(t, volumes[c.Secret]) != asYAML(t, wantVolume) {
				t.Errorf("%s: type %s's volume is\n%s\nwant\n%s", name, c.Type, asYAML(t, volumes[c.Secret]), asYAML(t, wantVolume))
			}
			wantMount := map[string]any{"name": c.Secret, "mountPath": c.MountPath, "readOnly": true}
			if asYAML(t, mounts[c.Secret]) != asYAML(t, wantMount) {
				t.Errorf("%s: type %s's mount is\n%s\nwant\n%s", name, c.Type, asYAML(t, mounts[c.Secret]), asYAML(t, wantMount))
			}
		}
	}

	if out, err := h.run("template", release, chartDir(t), "--set", "config.providers[0].name=a", "--set", "config.providers[0].type=vmware"); err == nil ||
		!strings.Contains(out, "/config/providers/0/type") || !strings.Contains(out, "'"+strings.Join(config.TypeNames(), "', '")+"'") {
		t.Errorf("helm template with a provider of type vmware: err %v, want the schema to refuse it:\n%.2000s", err, out)
	}
}
