package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Labels: a provider's `labels:` and a target's (a kvm host's), exported once per target in
// proxy_operator_provider_target_info. Their names follow Prometheus's label name rules; the
// names the exporter's own series carry, or that Prometheus adds, are refused.

// reservedLabels are the label names a labels map may not use: target_info's own labels, and
// those Prometheus adds to every scraped series.
var reservedLabels = []string{"provider", "target", "job", "instance"}

// LabelNameProblem says what is wrong with a label name of a labels map; "" when it is valid.
func LabelNameProblem(name string) string {
	const rule = "must match [a-zA-Z_][a-zA-Z0-9_]* (Prometheus's label names)"
	if name == "" {
		return "invalid label name \"\": " + rule
	}
	for i, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Sprintf("invalid label name %s: %s", quote(name), rule)
		}
	}
	if strings.HasPrefix(name, "__") {
		return fmt.Sprintf("invalid label name %s: names starting with __ are reserved for Prometheus", quote(name))
	}
	for _, r := range reservedLabels {
		if name == r {
			return fmt.Sprintf("label name %s is reserved (the exporter's or Prometheus's own label; not allowed: %s, or a name starting with __)",
				quote(name), strings.Join(reservedLabels, ", "))
		}
	}
	return ""
}

// labels reads the optional labels field of m: a mapping of label names to non-empty string
// values. ok is false when a problem was recorded.
func (d *decoder) labels(m *mapping) (map[string]string, bool) {
	e, has := m.fields["labels"]
	if !has {
		return nil, true
	}
	path := join(m.path, "labels")
	v := d.resolve(e.value)
	if isNull(v) {
		return nil, true
	}
	if v == nil || v.Kind != yaml.MappingNode {
		d.add(v, path, "must be a mapping of label names to values, got %s", describe(v))
		return nil, false
	}
	out := make(map[string]string, len(v.Content)/2)
	ok := true
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := d.resolve(v.Content[i]), d.resolve(v.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			d.add(k, path, "a label name must be a string, got %s", describe(k))
			ok = false
			continue
		}
		field := join(path, k.Value)
		if p := LabelNameProblem(k.Value); p != "" {
			d.add(k, field, "%s", p)
			ok = false
			continue
		}
		if _, dup := out[k.Value]; dup {
			d.add(k, field, "duplicate label %s", quote(k.Value))
			ok = false
			continue
		}
		if val == nil || val.Kind != yaml.ScalarNode || isNull(val) {
			d.add(val, field, "a label value must be a string, got %s", describe(val))
			ok = false
			continue
		}
		if val.Value == "" {
			d.add(val, field, "a label value must not be empty (Prometheus drops a label with an empty value)")
			ok = false
			continue
		}
		if k.Value == MaintenanceLabel {
			if p := MaintenanceValueProblem(val.Value); p != "" {
				d.add(val, field, "%s", p)
				ok = false
				continue
			}
		}
		out[k.Value] = val.Value
	}
	return out, ok
}

// MaintenanceLabel is the label that puts a target in maintenance (deliberately out of
// service: reason Maintenance, neither up nor down): "true" until the label is removed or set
// to "false", or an RFC 3339 time until which the target is in maintenance. A host's value wins
// over its provider's, as for every label.
const MaintenanceLabel = "maintenance"

// MaintenanceValueProblem says what is wrong with a value of the maintenance label; "" when it
// is valid.
func MaintenanceValueProblem(v string) string {
	if v == "true" || v == "false" {
		return ""
	}
	if _, err := time.Parse(time.RFC3339, v); err != nil {
		return fmt.Sprintf("invalid maintenance %s: want true, false or an RFC 3339 end time such as 2026-12-24T06:00:00Z", quote(v))
	}
	return ""
}

// InMaintenance reports whether labels (a target's, merged) put it in maintenance at now, and
// how, for its message: "label maintenance=true" or "label maintenance until TIME". An end
// time that has passed, "false" or no label is not maintenance.
func InMaintenance(labels map[string]string, now time.Time) (bool, string) {
	v, ok := labels[MaintenanceLabel]
	switch {
	case !ok || v == "false":
		return false, ""
	case v == "true":
		return true, "label maintenance=true"
	}
	until, err := time.Parse(time.RFC3339, v)
	if err != nil || !now.Before(until) {
		return false, ""
	}
	return true, "label maintenance until " + until.UTC().Format(time.RFC3339)
}

// Labels reads the mapping's optional labels field (a target's own labels, in a type's block);
// nil when absent or null.
func (f *Fields) Labels() map[string]string {
	labels, _ := f.d.labels(f.m)
	return labels
}

// TargetLabeler is a Block whose targets carry labels of their own (a kvm host's labels), beside
// the provider's.
type TargetLabeler interface {
	// TargetLabels maps a target's name to its own labels; targets without any are left out.
	TargetLabels() map[string]map[string]string
}
