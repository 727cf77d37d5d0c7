package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/helm"
)

// TestFilesListTheBuildsTypes: the CRD's enum marker and the docs' marked places list exactly
// the registered provider types.
func TestFilesListTheBuildsTypes(t *testing.T) {
	stale, err := generate("../..", names(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("%s do not list the build's provider types %v: run `make generate`", strings.Join(stale, ", "), names())
	}
}

// fixture is a module with two provider types a and b in packages p/a and p/b, each with its
// sections, and the files gentypes edits.
func fixture(t *testing.T) (root string, files map[string]string) {
	t.Helper()
	root = t.TempDir()
	files = map[string]string{
		"go.mod":      "module example.com/m\n",
		providersFile: "package providers\n\nimport (\n\t_ \"example.com/m/p/a\"\n\t_ \"example.com/m/p/b\"\n)\n",
		typesFile:     "package v1alpha1\n\ntype S struct {\n\t// +optional\n\t// +kubebuilder:validation:Enum=a;b\n\tType string `json:\"type\"`\n}\n",
	}
	for _, d := range docs {
		files[d] = "| TYPE | <!-- provider types -->`a`, `b`<!-- end provider types --> |\nkept\n"
	}
	for _, d := range sectionDocs {
		name := filepath.Base(d)
		files[d] += "# Doc\n\n<!-- provider type sections: see p/<type>/" + name + " -->\nstale\n<!-- end provider type sections -->\n\n## After\n"
		// b's section comes first in the imports' order: the doc follows the types' order.
		files["p/b/"+name] = "<!-- the b section -->\n\n### Type `b`\n\nB costs $1. [A's](../a/" + name + "), [the page](../../" + d + "#after), [docs](../../docs/other.md), [web](https://example.com/x.md).\n"
		files["p/a/"+name] = "## a\n\nA.\n"
	}
	files["p/a/"+credentialsFile] = "type: a\nsecret: sa\nmountPath: /etc/phe/sa\ndescription: the key of a\nkeys:\n  - {file: key.pem, value: key, field: keyFile}\n"
	files["p/b/"+credentialsFile] = "# b's files.\ntype: b\nsecret: sb\nmountPath: /etc/phe/sb\ndescription: configs of b\nfiles: {value: files, field: config, example: x.conf}\n"
	files[chartValuesFile] = "# Credentials.\ncredentials:\n  # stale\n  old: {}\n\n# Next.\nnext: 1\n"
	files[chartSchemaFile] = "{\n  \"properties\": {\n    \"config\": {\n      \"properties\": {\n        \"providers\": {\n          \"items\": {\n            \"properties\": {\n" +
		"              \"name\": {},\n              \"type\": {\"type\": \"string\"}\n            }\n          }\n        }\n      }\n    },\n    \"credentials\": {},\n    \"next\": {\"a<b\": 1}\n  }\n}\n"
	files[deploymentFile] = "          volumeMounts:\n            - name: config\n            # provider types' credentials mounts (generated)\n            - name: stale\n            # end provider types' credentials mounts\n" +
		"      volumes:\n        # provider types' credentials volumes (generated)\n        # end provider types' credentials volumes\n        - name: kept\n"
	files[deployDoc] = "# Deploy\n\n<!-- provider type secrets: generated -->\nstale\n<!-- end provider type secrets -->\n\nkept\n"
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, files
}

// TestGenerateRewritesEveryPlace: a build with another list of types rewrites the enum, each
// list and each doc's sections, and only them.
func TestGenerateRewritesEveryPlace(t *testing.T) {
	root, files := fixture(t)
	written := []string{providersFile}
	for _, d := range sectionDocs {
		files["p/c/"+filepath.Base(d)] = "### Type `tcp`\n\nT.\n"
		written = append(written, "p/c/"+filepath.Base(d))
	}
	files["p/c/"+credentialsFile] = "type: tcp\nsecret: tcp-certs\nmountPath: /etc/phe/tcp\ndescription: a client certificate\nkeys:\n" +
		"  - {file: tls.crt, value: cert, field: certFile}\n  - {file: tls.key, value: key, field: keyFile}\n"
	written = append(written, "p/c/"+credentialsFile)
	files[providersFile] = strings.Replace(files[providersFile], "\n)", "\n\t_ \"example.com/m/p/c\"\n)", 1)
	for _, name := range written {
		os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := generate(root, []string{"a", "b", "tcp"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{typesFile, "docs/crd.md", "docs/configuration.md", "docs/architecture.md", "docs/reasons.md", "docs/runbooks.md",
		chartTypesFile, chartValuesFile, chartSchemaFile, deploymentFile, deployDoc}; !slices.Equal(stale, want) {
		t.Errorf("rewrote %v, want %v", stale, want)
	}
	got, _ := os.ReadFile(filepath.Join(root, typesFile))
	if !strings.Contains(string(got), "\t// +kubebuilder:validation:Enum=a;b;tcp\n\tType string `json:\"type\"`") {
		t.Errorf("types.go after generate:\n%s", got)
	}
	for _, d := range docs {
		got, _ := os.ReadFile(filepath.Join(root, d))
		if want := "| TYPE | <!-- provider types -->`a`, `b`, `tcp`<!-- end provider types --> |\nkept\n"; !strings.HasPrefix(string(got), want) {
			t.Errorf("%s after generate:\n%s\nwant it to start with\n%s", d, got, want)
		}
	}
	for _, d := range sectionDocs {
		name := filepath.Base(d)
		got, _ := os.ReadFile(filepath.Join(root, d))
		want := "# Doc\n\n<!-- provider type sections: see p/<type>/" + name + " -->\n" +
			"## a\n\nA.\n\n" +
			"### Type `b`\n\nB costs $1. [A's](../p/a/" + name + "), [the page](#after), [docs](other.md), [web](https://example.com/x.md).\n\n" +
			files["p/c/"+name] +
			"<!-- end provider type sections -->\n\n## After\n"
		if !strings.HasSuffix(string(got), want) {
			t.Errorf("%s after generate:\n%s\nwant it to end with\n%s", d, got, want)
		}
	}
	for name, want := range map[string]string{
		chartTypesFile: "credentials:\n  - type: a\n    secret: sa\n    mountPath: /etc/phe/sa\n    description: the key of a\n    keys:\n" +
			"      - file: key.pem\n        value: key\n        field: keyFile\n" +
			"  - type: b\n    secret: sb\n    mountPath: /etc/phe/sb\n    description: configs of b\n    files:\n      value: files\n      field: config\n      example: x.conf\n" +
			"  - type: tcp\n    secret: tcp-certs\n    mountPath: /etc/phe/tcp\n    description: a client certificate\n    keys:\n" +
			"      - file: tls.crt\n        value: cert\n        field: certFile\n      - file: tls.key\n        value: key\n        field: keyFile\n",
		chartValuesFile: "# Credentials.\ncredentials:\n" +
			"  # /etc/phe/sa/: key.pem (keyFile, in key) of a providers: the key of a.\n  sa:\n    existingSecret: \"\"\n    key: \"\"\n" +
			"  # /etc/phe/sb/: files of any name (config of b providers), in files as file name to content,\n  # e.g. x.conf: |-; configs of b.\n  sb:\n    existingSecret: \"\"\n    files: {}\n" +
			"  # /etc/phe/tcp/: tls.crt (certFile, in cert), tls.key (keyFile, in key) of tcp providers: a\n  # client certificate.\n  tcp-certs:\n    existingSecret: \"\"\n    cert: \"\"\n    key: \"\"\n" +
			"\n# Next.\nnext: 1\n",
		deploymentFile: "          volumeMounts:\n            - name: config\n            # provider types' credentials mounts (generated)\n" +
			"            - name: sa\n              mountPath: /etc/phe/sa\n              readOnly: true\n" +
			"            - name: sb\n              mountPath: /etc/phe/sb\n              readOnly: true\n" +
			"            - name: tcp-certs\n              mountPath: /etc/phe/tcp\n              readOnly: true\n" +
			"            # end provider types' credentials mounts\n      volumes:\n        # provider types' credentials volumes (generated)\n" +
			"        - name: sa\n          secret:\n            secretName: provider-health-exporter-sa\n            defaultMode: 0440\n            optional: true\n" +
			"        - name: sb\n          secret:\n            secretName: provider-health-exporter-sb\n            defaultMode: 0440\n            optional: true\n" +
			"        - name: tcp-certs\n          secret:\n            secretName: provider-health-exporter-tcp-certs\n            defaultMode: 0440\n            optional: true\n" +
			"        # end provider types' credentials volumes\n        - name: kept\n",
		deployDoc: "# Deploy\n\n<!-- provider type secrets: generated -->\n" +
			"| type | Secret (namespace `provider-health-exporter`) | mounted at | keys (the providers file's field) |\n|---|---|---|---|\n" +
			"| `a` | `provider-health-exporter-sa` | `/etc/phe/sa/` | `key.pem` (`keyFile`): the key of a |\n" +
			"| `b` | `provider-health-exporter-sb` | `/etc/phe/sb/` | files of any name, e.g. `x.conf` (`config`): configs of b |\n" +
			"| `tcp` | `provider-health-exporter-tcp-certs` | `/etc/phe/tcp/` | `tls.crt` (`certFile`), `tls.key` (`keyFile`): a client certificate |\n" +
			"<!-- end provider type secrets -->\n\nkept\n",
	} {
		got, _ := os.ReadFile(filepath.Join(root, name))
		if name == chartTypesFile {
			// After its header comment.
			_, got, _ = bytes.Cut(got, []byte("\ncredentials:"))
			got = append([]byte("credentials:"), got...)
		}
		if string(got) != want {
			t.Errorf("%s after generate:\n%s\nwant\n%s", name, got, want)
		}
	}
	var schema struct {
		Properties struct {
			Config struct {
				Properties struct {
					Providers struct {
						Items struct {
							Properties map[string]struct {
								Type string
								Enum []string
							}
						}
					}
				}
			}
			Credentials struct {
				AdditionalProperties bool
				Properties           map[string]struct {
					AdditionalProperties bool
					Properties           map[string]map[string]any
				}
			}
			Next map[string]int
		}
	}
	raw, _ := os.ReadFile(filepath.Join(root, chartSchemaFile))
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("%s after generate: %v\n%s", chartSchemaFile, err, raw)
	}
	if typ := schema.Properties.Config.Properties.Providers.Items.Properties["type"]; typ.Type != "string" || !slices.Equal(typ.Enum, []string{"a", "b", "tcp"}) {
		t.Errorf("the schema of a provider's type: %+v, want an enum of a, b, tcp\n%s", typ, raw)
	}
	if _, ok := schema.Properties.Config.Properties.Providers.Items.Properties["name"]; !ok || schema.Properties.Next["a<b"] != 1 || !strings.Contains(string(raw), `"a<b"`) {
		t.Errorf("the rest of the schema is not kept byte for byte:\n%s", raw)
	}
	creds := schema.Properties.Credentials
	var secrets []string
	for name, c := range creds.Properties {
		secrets = append(secrets, name)
		var values []string
		for v := range c.Properties {
			values = append(values, v)
		}
		slices.Sort(values)
		want := map[string][]string{"sa": {"existingSecret", "key"}, "sb": {"existingSecret", "files"}, "tcp-certs": {"cert", "existingSecret", "key"}}[name]
		if !slices.Equal(values, want) || c.AdditionalProperties {
			t.Errorf("the schema of credentials.%s has %v (additional properties %v), want %v and no other", name, values, c.AdditionalProperties, want)
		}
	}
	if slices.Sort(secrets); !slices.Equal(secrets, []string{"sa", "sb", "tcp-certs"}) || creds.AdditionalProperties {
		t.Errorf("the schema's credentials are %v, want sa, sb, tcp-certs and no other", secrets)
	}
	if stale, err := generate(root, []string{"a", "b", "tcp"}, false); err != nil || len(stale) > 0 {
		t.Errorf("a second run finds %v stale (%v), want none", stale, err)
	}
	os.WriteFile(filepath.Join(root, docs[0]), []byte("no marker\n"), 0o644)
	if _, err := generate(root, []string{"a", "b", "tcp"}, false); err == nil || !strings.Contains(err.Error(), docs[0]) {
		t.Errorf("a file without its marked place: error %v, want one naming %s", err, docs[0])
	}
}

// TestSectionProblems: a type's package without its section, a section whose heading names no
// registered type or the same type twice, and a registered type without a section are errors
// that name the file and say what to write.
func TestSectionProblems(t *testing.T) {
	for _, tc := range []struct {
		name, file, body string
		types            []string
		want             string
	}{
		{"missing", "p/b/reasons.md", "", []string{"a", "b"}, "p/b has no reasons.md: the section of docs/reasons.md for the type it registers"},
		{"no heading", "p/b/reasons.md", "text\n", []string{"a", "b"}, `p/b/reasons.md: the first line must be a heading that names the type (like "## b"), got "text"`},
		{"unknown type", "p/b/reasons.md", "## c\n", []string{"a", "b"}, `p/b/reasons.md: its heading names "c", which is not a registered provider type (a, b)`},
		{"twice", "p/b/reasons.md", "## a\n", []string{"a", "b"}, "p/b/reasons.md: a second section for type a"},
		{"unlisted type", "", "", []string{"a", "b", "c"}, "type c has no section for docs/reasons.md: none of the packages providers/providers.go imports has a reasons.md naming it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := fixture(t)
			switch {
			case tc.file != "" && tc.body == "":
				os.Remove(filepath.Join(root, tc.file))
			case tc.file != "":
				os.WriteFile(filepath.Join(root, tc.file), []byte(tc.body), 0o644)
			}
			_, err := generate(root, tc.types, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCredentialsProblems: a type's package without its credentials.yaml, an unknown or bad
// field in one, two types sharing a Secret or a mount, and a registered type without one are
// errors that name the file and the field.
func TestCredentialsProblems(t *testing.T) {
	const file = "p/b/" + credentialsFile
	b := "type: b\nsecret: sb\nmountPath: /etc/phe/sb\ndescription: configs of b\n"
	for _, tc := range []struct {
		name, body string
		types      []string
		want       string
	}{
		{"missing", "", []string{"a", "b"}, "p/b has no credentials.yaml: the Secret of the type it registers"},
		{"unknown field", b + "secrte: x\nfiles: {value: files, field: config, example: x.conf}\n", []string{"a", "b"},
			file + ": yaml: unmarshal errors:\n  line 5: field secrte not found"},
		{"not YAML", "type: [b\n", []string{"a", "b"}, file + ": yaml: line 1"},
		{"unknown type", strings.Replace(b, "type: b", "type: c", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + `: type: "c" is not a registered provider type (a, b)`},
		{"bad secret", strings.Replace(b, "secret: sb", "secret: S_b", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + `: secret: "S_b": want a lower-case DNS label`},
		{"mount outside /etc/phe", strings.Replace(b, "/etc/phe/sb", "/root/.ssh", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + `: mountPath: "/root/.ssh": want a directory of its own under /etc/phe/, like /etc/phe/sb`},
		{"the chart's own mount", strings.Replace(b, "/etc/phe/sb", "/etc/phe/config", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + ": mountPath: /etc/phe/config is the chart's own mount"},
		{"two-line description", strings.Replace(b, "configs of b", "|\n  configs\n  of b", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + ": description: want one line of text"},
		{"neither keys nor files", b, []string{"a", "b"}, file + ": keys: want the Secret's keys, or files:"},
		{"keys and files", b + "keys: [{file: k, value: v, field: f}]\nfiles: {value: files, field: config, example: x.conf}\n", []string{"a", "b"},
			file + ": files: set keys or files, not both"},
		{"value existingSecret", b + "keys: [{file: k, value: existingSecret, field: f}]\n", []string{"a", "b"},
			file + `: keys[0].value: "existingSecret": want a camelCase name of the chart's values, not existingSecret`},
		{"file twice", b + "keys: [{file: k, value: v, field: f}, {file: k, value: w, field: g}]\n", []string{"a", "b"},
			file + `: keys[1].file: "k" twice`},
		{"bad file name", b + "keys: [{file: a/b, value: v, field: f}]\n", []string{"a", "b"}, file + `: keys[0].file: "a/b": want a Secret's key`},
		{"no field", b + "keys: [{file: k, value: v}]\n", []string{"a", "b"}, file + `: keys[0].field: "": want the field of the type's block`},
		{"files without example", b + "files: {value: files, field: config}\n", []string{"a", "b"}, file + `: files.example: "": want a file's name`},
		{"a's Secret", strings.Replace(b, "secret: sb", "secret: sa", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + `: secret: "sa" is type a's Secret too: each type has its own`},
		{"a's mount", strings.Replace(b, "/etc/phe/sb", "/etc/phe/sa", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + ": mountPath: /etc/phe/sa is where type a's Secret is mounted"},
		{"a twice", strings.Replace(strings.Replace(b, "type: b", "type: a", 1), "secret: sb", "secret: sc", 1) + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b"},
			file + ": type: a second credentials.yaml for type a"},
		{"none and a Secret", "type: b\nnone: true\nsecret: sb\n", []string{"a", "b"}, file + ": none: a type without a Secret sets nothing else"},
		{"unlisted type", b + "keys: [{file: k, value: v, field: f}]\n", []string{"a", "b", "c"},
			"type c has no credentials.yaml: none of the packages providers/providers.go imports has one naming it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := fixture(t)
			if tc.body == "" {
				os.Remove(filepath.Join(root, file))
			} else if err := os.WriteFile(filepath.Join(root, file), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := generate(root, tc.types, false)
			if len(tc.types) > 2 {
				// generate finds c without sections first.
				_, err = loadCredentials(root, []string{"p/a", "p/b"}, tc.types)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestAddedTypeInTheChart: a type added to the build gets, from its credentials.yaml alone, its
// Secret, volume and mount in the real chart (copied into the fixture, generated for the
// fixture's types, rendered by a real helm), its values accepted by the schema, and a provider
// of it in config.providers; a type the build no longer has is refused there, and a type
// without a Secret (none: true) gets none.
func TestAddedTypeInTheChart(t *testing.T) {
	helmBin := helm.RequireBinary(t)
	root, files := fixture(t)
	// The chart itself in place of the fixture's values.yaml and schema; generate writes its
	// parts for a, b and tcp.
	chart := filepath.Dir(chartValuesFile)
	if err := os.RemoveAll(filepath.Join(root, chart)); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(root, chart), os.DirFS(filepath.Join("../..", chart))); err != nil {
		t.Fatal(err)
	}
	files[providersFile] = strings.Replace(files[providersFile], "\n)", "\n\t_ \"example.com/m/p/c\"\n)", 1)
	files["p/c/"+credentialsFile] = "type: tcp\nsecret: tcp-certs\nmountPath: /etc/phe/tcp\ndescription: a client certificate\nkeys:\n" +
		"  - {file: tls.crt, value: cert, field: certFile}\n  - {file: tls.key, value: key, field: keyFile}\n"
	for _, d := range sectionDocs {
		files["p/c/"+filepath.Base(d)] = "## tcp\n"
	}
	// a names no file: no Secret.
	files["p/a/"+credentialsFile] = "type: a\nnone: true\n"
	for name, body := range files {
		if strings.HasPrefix(name, "p/") || name == providersFile {
			os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
			if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := generate(root, []string{"a", "b", "tcp"}, true); err != nil {
		t.Fatal(err)
	}

	template := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		home := t.TempDir()
		cmd := exec.CommandContext(ctx, helmBin, append([]string{"template", "r", filepath.Join(root, chart), "--namespace", "ns"}, args...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := template("--set", "credentials.tcp-certs.cert=CERT", "--set", "credentials.tcp-certs.key=KEY",
		"--set", "config.providers[0].name=t", "--set", "config.providers[0].type=tcp")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var secret, deployment map[string]any
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode the rendering: %v", err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		switch {
		case obj["kind"] == "Secret" && meta["name"] == "r-provider-health-exporter-tcp-certs":
			secret = obj
		case obj["kind"] == "Deployment":
			deployment = obj
		}
	}
	if secret == nil || deployment == nil {
		t.Fatalf("the rendering has no Secret r-provider-health-exporter-tcp-certs or no Deployment:\n%s", out)
	}
	if data := secret["data"].(map[string]any); data["tls.crt"] != base64.StdEncoding.EncodeToString([]byte("CERT")) ||
		data["tls.key"] != base64.StdEncoding.EncodeToString([]byte("KEY")) || len(data) != 2 {
		t.Errorf("the Secret holds %v, want tls.crt and tls.key from the values", data)
	}
	pod := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	var volumes, mounts []string
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if s, ok := v["secret"].(map[string]any); ok {
			volumes = append(volumes, fmt.Sprintf("%s=%s", v["name"], s["secretName"]))
		}
	}
	for _, m := range pod["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any) {
		m := m.(map[string]any)
		mounts = append(mounts, fmt.Sprintf("%s=%s", m["name"], m["mountPath"]))
	}
	if want := []string{"sb=r-provider-health-exporter-sb", "tcp-certs=r-provider-health-exporter-tcp-certs"}; !slices.Equal(volumes, want) {
		t.Errorf("the Secret volumes are %v, want %v", volumes, want)
	}
	if want := []string{"config=/etc/phe/config", "sb=/etc/phe/sb", "tcp-certs=/etc/phe/tcp"}; !slices.Equal(mounts, want) {
		t.Errorf("the mounts are %v, want %v", mounts, want)
	}
	// The build's types only: kvm is not one of the fixture's; a has no Secret.
	if out, err := template("--set", "config.providers[0].name=t", "--set", "config.providers[0].type=a"); err != nil {
		t.Errorf("helm template with a provider of type a: %v\n%s", err, out)
	}
	for _, set := range []string{"config.providers[0].type=kvm", "credentials.ssh.privateKey=x", "credentials.sa.key=x"} {
		if out, err := template("--set", "config.providers[0].name=t", "--set", set); err == nil {
			t.Errorf("helm template --set %s: accepted, want the schema to refuse it:\n%.500s", set, out)
		}
	}
}
