package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// A type's credentials are a file credentials.yaml in its package's directory: the Secret that
// holds the files its providers name (one Secret per type), where it is mounted and which keys
// it holds. From them gentypes writes, so that adding a type edits no chart or deploy file:
//   - the chart's files/types.yaml, which templates/deployment.yaml (volumes and mounts) and
//     templates/secrets.yaml (the Secrets the chart creates) range over;
//   - the chart's values.yaml credentials block (one entry per Secret, with its comment, which
//     scripts/chartdoc turns into the README), and values.schema.json's credentials
//     properties and the enum of a provider's type;
//   - deploy/deployment.yaml's volumes and mounts, between its marker comments;
//   - the table of the Secrets in docs/deploy.md, between its marker comments.

// credentialsFile is the name of a type's credentials file in its package's directory.
const credentialsFile = "credentials.yaml"

// The chart's and deploy/'s files gentypes writes, relative to the module root.
const (
	chartTypesFile  = "charts/provider-health-exporter/files/types.yaml"
	chartValuesFile = "charts/provider-health-exporter/values.yaml"
	chartSchemaFile = "charts/provider-health-exporter/values.schema.json"
	deploymentFile  = "deploy/deployment.yaml"
	deployDoc       = "docs/deploy.md"
)

// maxCredentialsFile caps the read of a credentials file: a few hundred bytes each.
const maxCredentialsFile = 64 << 10

// credentials is a type's credentials.yaml.
type credentials struct {
	Type string `yaml:"type" json:"type"`
	// None says that the type's providers name no file: it has no Secret, and sets nothing else.
	None        bool             `yaml:"none,omitempty" json:"none,omitempty"`
	Secret      string           `yaml:"secret,omitempty" json:"secret,omitempty"`
	MountPath   string           `yaml:"mountPath,omitempty" json:"mountPath,omitempty"`
	Description string           `yaml:"description,omitempty" json:"description,omitempty"`
	Keys        []credentialKey  `yaml:"keys,omitempty" json:"keys,omitempty"`
	Files       *credentialFiles `yaml:"files,omitempty" json:"files,omitempty"`
}

// credentialKey is one file of a Secret of fixed keys.
type credentialKey struct {
	File  string `yaml:"file" json:"file"`   // the Secret's key, the file's name under mountPath
	Value string `yaml:"value" json:"value"` // the chart's value credentials.<secret>.<value>
	Field string `yaml:"field" json:"field"` // the field of the type's block that names the file
}

// credentialFiles is a Secret of files of any name: the chart's value credentials.<secret>.<value>
// maps each file's name to its content.
type credentialFiles struct {
	Value   string `yaml:"value" json:"value"`
	Field   string `yaml:"field" json:"field"`
	Example string `yaml:"example" json:"example"` // a file's name, for the docs
}

var (
	secretName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$`)
	fileName   = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	valueName  = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	// reservedMounts are the chart's own mounts.
	reservedMounts = []string{"/etc/phe/config", "/etc/phe/web"}
)

// loadCredentials reads the credentials file of every package in dirs (relative to root) and
// returns them in the order of types; each type must have exactly one. Every problem names the
// file and the field.
func loadCredentials(root string, dirs, types []string) ([]credentials, error) {
	byType := map[string]credentials{}
	bySecret := map[string]string{}
	byMount := map[string]string{}
	for _, dir := range dirs {
		file := filepath.ToSlash(filepath.Join(dir, credentialsFile))
		raw, err := fileread.Read(filepath.Join(root, file), maxCredentialsFile)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s has no %s: the Secret of the type it registers, for the Helm chart and deploy/ (docs/providers.md)", dir, credentialsFile)
			}
			return nil, err
		}
		var c credentials
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if err := c.validate(types); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if _, ok := byType[c.Type]; ok {
			return nil, fmt.Errorf("%s: type: a second %s for type %s", file, credentialsFile, c.Type)
		}
		if c.None {
			byType[c.Type] = c
			continue
		}
		if other, ok := bySecret[c.Secret]; ok {
			return nil, fmt.Errorf("%s: secret: %q is type %s's Secret too: each type has its own", file, c.Secret, other)
		}
		if other, ok := byMount[c.MountPath]; ok {
			return nil, fmt.Errorf("%s: mountPath: %s is where type %s's Secret is mounted", file, c.MountPath, other)
		}
		byType[c.Type], bySecret[c.Secret], byMount[c.MountPath] = c, c.Type, c.Type
	}
	var out []credentials
	for _, t := range types {
		c, ok := byType[t]
		if !ok {
			return nil, fmt.Errorf("type %s has no %s: none of the packages %s imports has one naming it", t, credentialsFile, providersFile)
		}
		out = append(out, c)
	}
	return out, nil
}

// validate checks the fields of c, the problem naming the field.
func (c credentials) validate(types []string) error {
	switch {
	case !slices.Contains(types, c.Type):
		return fmt.Errorf("type: %q is not a registered provider type (%s)", c.Type, strings.Join(types, ", "))
	case c.None && (c.Secret != "" || c.MountPath != "" || c.Description != "" || c.Keys != nil || c.Files != nil):
		return fmt.Errorf("none: a type without a Secret sets nothing else")
	case c.None:
		return nil
	case !secretName.MatchString(c.Secret):
		return fmt.Errorf("secret: %q: want a lower-case DNS label of at most 32 characters (the Secret is <fullname>-<secret>)", c.Secret)
	case !strings.HasPrefix(c.MountPath, "/etc/phe/") || path.Clean(c.MountPath) != c.MountPath || strings.Count(c.MountPath, "/") != 3:
		return fmt.Errorf("mountPath: %q: want a directory of its own under /etc/phe/, like /etc/phe/%s", c.MountPath, c.Secret)
	case slices.Contains(reservedMounts, c.MountPath):
		return fmt.Errorf("mountPath: %s is the chart's own mount", c.MountPath)
	case strings.TrimSpace(c.Description) == "" || strings.ContainsAny(c.Description, "\n|"):
		return fmt.Errorf("description: want one line of text, without |")
	case len(c.Keys) == 0 && c.Files == nil:
		return fmt.Errorf("keys: want the Secret's keys, or files: for files of any name")
	case len(c.Keys) > 0 && c.Files != nil:
		return fmt.Errorf("files: set keys or files, not both")
	}
	if f := c.Files; f != nil {
		switch {
		case !valueName.MatchString(f.Value) || f.Value == "existingSecret":
			return fmt.Errorf("files.value: %q: want a camelCase name of the chart's values, not existingSecret", f.Value)
		case !valueName.MatchString(f.Field):
			return fmt.Errorf("files.field: %q: want the field of the type's block that names a file", f.Field)
		case !fileName.MatchString(f.Example):
			return fmt.Errorf("files.example: %q: want a file's name, like edge.kubeconfig", f.Example)
		}
	}
	var files, values []string
	for i, k := range c.Keys {
		switch {
		case !fileName.MatchString(k.File):
			return fmt.Errorf("keys[%d].file: %q: want a Secret's key (letters, digits, -, _, .)", i, k.File)
		case slices.Contains(files, k.File):
			return fmt.Errorf("keys[%d].file: %q twice", i, k.File)
		case !valueName.MatchString(k.Value) || k.Value == "existingSecret":
			return fmt.Errorf("keys[%d].value: %q: want a camelCase name of the chart's values, not existingSecret", i, k.Value)
		case slices.Contains(values, k.Value):
			return fmt.Errorf("keys[%d].value: %q twice", i, k.Value)
		case !valueName.MatchString(k.Field):
			return fmt.Errorf("keys[%d].field: %q: want the field of the type's block that names the file", i, k.Field)
		}
		files, values = append(files, k.File), append(values, k.Value)
	}
	return nil
}

// withSecrets are the credentials of the types that have a Secret.
func withSecrets(creds []credentials) []credentials {
	return slices.DeleteFunc(slices.Clone(creds), func(c credentials) bool { return c.None })
}

// chartTypes is the chart's files/types.yaml: every type, those without a Secret marked none.
func chartTypes(creds []credentials) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Generated by scripts/gentypes from each provider type's " + credentialsFile + " (make generate):\n" +
		"# do not edit. templates/deployment.yaml mounts each type's Secret, templates/secrets.yaml\n" +
		"# creates it from the values credentials.<secret>; a type marked none has no Secret.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]any{"credentials": creds}); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// keyList is the Secret's keys as the docs name them: `file` (`field`), ...
func (c credentials) keyList() string {
	if c.Files != nil {
		return fmt.Sprintf("files of any name, e.g. `%s` (`%s`)", c.Files.Example, c.Files.Field)
	}
	var parts []string
	for _, k := range c.Keys {
		parts = append(parts, fmt.Sprintf("`%s` (`%s`)", k.File, k.Field))
	}
	return strings.Join(parts, ", ")
}

// valuesComment is the comment of credentials.<secret> in values.yaml, wrapped.
func (c credentials) valuesComment() string {
	var text string
	if c.Files != nil {
		text = fmt.Sprintf("%s/: files of any name (%s of %s providers), in %s as file name to content, e.g. %s: |-; %s.",
			c.MountPath, c.Files.Field, c.Type, c.Files.Value, c.Files.Example, c.Description)
	} else {
		var parts []string
		for _, k := range c.Keys {
			parts = append(parts, fmt.Sprintf("%s (%s, in %s)", k.File, k.Field, k.Value))
		}
		text = fmt.Sprintf("%s/: %s of %s providers: %s.", c.MountPath, strings.Join(parts, ", "), c.Type, c.Description)
	}
	return wrap(text, "  # ", 96)
}

// wrap breaks text into lines of at most width characters, each starting with prefix.
func wrap(text, prefix string, width int) string {
	var out, line strings.Builder
	for _, w := range strings.Fields(text) {
		if line.Len() > 0 && len(prefix)+line.Len()+1+len(w) > width {
			out.WriteString(prefix + line.String() + "\n")
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(w)
	}
	out.WriteString(prefix + line.String() + "\n")
	return out.String()
}

// valuesBlock is the credentials block of values.yaml, from its key to the next top-level line.
var valuesBlock = regexp.MustCompile(`(?m)^credentials:\n(?:(?:[ \t].*)?\n)*`)

// chartValues rewrites values.yaml's credentials block: one entry per type, in the order of
// types, each with its comment, existingSecret and its values, empty.
func chartValues(creds []credentials) func([]byte) ([]byte, error) {
	var b strings.Builder
	b.WriteString("credentials:\n")
	for _, c := range withSecrets(creds) {
		b.WriteString(c.valuesComment())
		b.WriteString("  " + c.Secret + ":\n    existingSecret: \"\"\n")
		if c.Files != nil {
			b.WriteString("    " + c.Files.Value + ": {}\n")
		}
		for _, k := range c.Keys {
			b.WriteString("    " + k.Value + ": \"\"\n")
		}
	}
	b.WriteString("\n")
	return func(old []byte) ([]byte, error) {
		loc := valuesBlock.FindIndex(old)
		if loc == nil {
			return nil, fmt.Errorf("has no top-level credentials: block")
		}
		return slices.Concat(old[:loc[0]], []byte(b.String()), old[loc[1]:]), nil
	}
}

// object is a JSON object that keeps its keys' order.
type object []member

type member struct {
	key   string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		v, err := marshal(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// chartSchema rewrites, in values.schema.json, the schema of credentials (one object per
// type's Secret, its values strings, or a map of file names for files of any name) and of a
// provider's type in config.providers (an enum of the types).
func chartSchema(creds []credentials, types []string) func([]byte) ([]byte, error) {
	str := object{{"type", "string"}}
	props := object{}
	for _, c := range withSecrets(creds) {
		p := object{{"existingSecret", str}}
		if c.Files != nil {
			p = append(p, member{c.Files.Value, object{
				{"type", "object"},
				{"additionalProperties", str},
				{"propertyNames", object{{"pattern", fileName.String()}}},
			}})
		}
		for _, k := range c.Keys {
			p = append(p, member{k.Value, str})
		}
		props = append(props, member{c.Secret, object{
			{"type", "object"},
			{"additionalProperties", false},
			{"description", fmt.Sprintf("The Secret of %s providers, mounted at %s/: %s.", c.Type, c.MountPath, c.Description)},
			{"properties", p},
		}})
	}
	credentialsSchema := object{{"type", "object"}, {"additionalProperties", false}, {"properties", props}}
	typeSchema := object{{"type", "string"}, {"enum", types}}
	return func(old []byte) ([]byte, error) {
		b, err := replaceJSON(old, []string{"properties", "credentials"}, credentialsSchema)
		if err != nil {
			return nil, err
		}
		return replaceJSON(b, []string{"properties", "config", "properties", "providers", "items", "properties", "type"}, typeSchema)
	}
}

// replaceJSON replaces the value at the object keys path of the JSON document doc with v,
// indented as the line of its key; the rest of doc is kept byte for byte.
func replaceJSON(doc []byte, keys []string, v any) ([]byte, error) {
	start, end, err := findJSON(doc, keys)
	if err != nil {
		return nil, err
	}
	lineStart := bytes.LastIndexByte(doc[:start], '\n') + 1
	indent := doc[lineStart : lineStart+len(doc[lineStart:start])-len(bytes.TrimLeft(doc[lineStart:start], " "))]
	compact, err := marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, string(indent), "  "); err != nil {
		return nil, err
	}
	return slices.Concat(doc[:start], out.Bytes(), doc[end:]), nil
}

// findJSON returns the byte offsets of the value at the object keys path of doc.
func findJSON(doc []byte, keys []string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	for depth, key := range keys {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return 0, 0, fmt.Errorf("%s is not an object (%v)", strings.Join(keys[:depth], "."), err)
		}
		for {
			tok, err := dec.Token()
			if err != nil {
				return 0, 0, err
			}
			if tok == json.Delim('}') {
				return 0, 0, fmt.Errorf("has no %s", strings.Join(keys[:depth+1], "."))
			}
			if tok == key {
				break
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, 0, err
			}
		}
	}
	// The value starts after the colon that follows the key.
	start = int(dec.InputOffset())
	start += bytes.IndexByte(doc[start:], ':') + 1
	for start < len(doc) && (doc[start] == ' ' || doc[start] == '\n' || doc[start] == '\t' || doc[start] == '\r') {
		start++
	}
	var value json.RawMessage
	if err := dec.Decode(&value); err != nil {
		return 0, 0, err
	}
	return start, int(dec.InputOffset()), nil
}

// deployMarkers are deploy/deployment.yaml's marked places: the lines between a start and an
// end comment are the Secrets' mounts, and their volumes.
var (
	deployMounts  = regexp.MustCompile(`(?m)^( *)(# provider types' credentials mounts[^\n]*\n)(?:.*\n)*?( *# end provider types' credentials mounts\n)`)
	deployVolumes = regexp.MustCompile(`(?m)^( *)(# provider types' credentials volumes[^\n]*\n)(?:.*\n)*?( *# end provider types' credentials volumes\n)`)
)

// deployment rewrites deploy/deployment.yaml's mounts and volumes of the Secrets, named as the
// chart names them for the release provider-health-exporter.
func deployment(creds []credentials) func([]byte) ([]byte, error) {
	return func(old []byte) ([]byte, error) {
		out := old
		for _, place := range []struct {
			re   *regexp.Regexp
			what string
			item func(indent string, c credentials) string
		}{
			{deployMounts, "the credentials mounts", func(in string, c credentials) string {
				return in + "- name: " + c.Secret + "\n" + in + "  mountPath: " + c.MountPath + "\n" + in + "  readOnly: true\n"
			}},
			{deployVolumes, "the credentials volumes", func(in string, c credentials) string {
				return in + "- name: " + c.Secret + "\n" + in + "  secret:\n" +
					in + "    secretName: provider-health-exporter-" + c.Secret + "\n" +
					in + "    defaultMode: 0440\n" + in + "    optional: true\n"
			}},
		} {
			m := place.re.FindSubmatchIndex(out)
			if m == nil {
				return nil, fmt.Errorf("has no marked place for %s", place.what)
			}
			indent := string(out[m[2]:m[3]])
			var b strings.Builder
			b.WriteString(indent + string(out[m[4]:m[5]]))
			for _, c := range withSecrets(creds) {
				b.WriteString(place.item(indent, c))
			}
			b.Write(out[m[6]:m[7]])
			out = slices.Concat(out[:m[0]], []byte(b.String()), out[m[1]:])
		}
		return out, nil
	}
}

// deployTableMarker is docs/deploy.md's marked place for the table of the Secrets.
var deployTableMarker = regexp.MustCompile(`(?s)(<!-- provider type secrets[^\n]*-->\n).*?(<!-- end provider type secrets -->)`)

// deployTable rewrites docs/deploy.md's table of the Secrets deploy/ mounts.
func deployTable(creds []credentials) func([]byte) ([]byte, error) {
	var b strings.Builder
	b.WriteString("| type | Secret (namespace `provider-health-exporter`) | mounted at | keys (the providers file's field) |\n|---|---|---|---|\n")
	for _, c := range withSecrets(creds) {
		fmt.Fprintf(&b, "| `%s` | `provider-health-exporter-%s` | `%s/` | %s: %s |\n", c.Type, c.Secret, c.MountPath, c.keyList(), c.Description)
	}
	repl := "${1}" + strings.ReplaceAll(b.String(), "$", "$$") + "${2}"
	return func(old []byte) ([]byte, error) {
		if !deployTableMarker.Match(old) {
			return nil, fmt.Errorf("has no marked place for the provider types' Secrets")
		}
		return deployTableMarker.ReplaceAll(old, []byte(repl)), nil
	}
}
