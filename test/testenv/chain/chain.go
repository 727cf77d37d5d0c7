// Package chain renders the monitoring mixin for a test of the whole alert chain (the exporter,
// a real Prometheus evaluating the mixin's rules, a real Alertmanager with the mixin's inhibit
// rules and recommended route, a webhook receiver) with every duration divided by one scale, so
// that the chain behaves as in production, only faster: the mixin's _config (for: windows, rule
// intervals, the route's group_wait, group_interval and repeat_interval) and Prometheus's own
// durations (scrape and evaluation interval, resend delay: 1m by default).
//
// The mixin is rendered from its sources as `make mixin` renders them (go-jsonnet from
// tools/go.mod), so a test sees the rules as the sources say now.
package chain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

// PrometheusDefault is Prometheus's default scrape and evaluation interval and resend delay.
const PrometheusDefault = time.Minute

// Mixin is the mixin rendered with every duration scaled: its rule files, inhibit rules and
// recommended route, and its scaled _config.
type Mixin struct {
	// Scale divides every duration.
	Scale int
	// RuleFiles maps a file name to its content (the alerts' and the recording rules').
	RuleFiles    map[string][]byte
	InhibitRules []map[string]any
	Routes       []map[string]any
	// Config is the scaled _config, as JSON decodes it.
	Config map[string]any
	// TargetDownFor, ProviderDownFor, GroupWait, GroupInterval and RepeatInterval as scaled.
	TargetDownFor, ProviderDownFor, GroupWait, GroupInterval, RepeatInterval time.Duration
}

// Interval is Prometheus's default interval (scrape, evaluation, resend delay), scaled.
func (m *Mixin) Interval() time.Duration { return PrometheusDefault / time.Duration(m.Scale) }

// Duration returns the scaled duration of a _config key, failing tb when it is none.
func (m *Mixin) Duration(tb testing.TB, key string) time.Duration {
	tb.Helper()
	s, ok := m.Config[key].(string)
	if !ok {
		tb.Fatalf("chain: _config.%s is %v, not a duration", key, m.Config[key])
	}
	v, err := model.ParseDuration(s)
	if err != nil {
		tb.Fatalf("chain: _config.%s: %v", key, err)
	}
	return time.Duration(v)
}

// Severity returns _config.severities[name].
func (m *Mixin) Severity(tb testing.TB, name string) string {
	tb.Helper()
	sev, _ := m.Config["severities"].(map[string]any)
	s, ok := sev[name].(string)
	if !ok {
		tb.Fatalf("chain: _config.severities.%s is %v", name, sev[name])
	}
	return s
}

// Render renders the mixin's entry points with every duration of its _config divided by scale.
func Render(tb testing.TB, scale int) *Mixin {
	tb.Helper()
	return RenderWith(tb, scale, nil)
}

// RenderWith is Render with some _config keys set to values of their own after the scaling
// (e.g. {"exporterDownFor": "1m"}): a window that must cover what does not shrink with the
// scale (a kubelet's latency), said where it is used.
func RenderWith(tb testing.TB, scale int, overrides map[string]any) *Mixin {
	tb.Helper()
	if scale < 1 {
		tb.Fatalf("chain: scale %d: want at least 1", scale)
	}
	root, err := Root()
	if err != nil {
		tb.Fatalf("chain: %v", err)
	}
	defaults := map[string]any{}
	if err := json.Unmarshal(jsonnetEval(tb, root, "-e", "(import 'mixin.libsonnet')._config"), &defaults); err != nil {
		tb.Fatalf("chain: decode the mixin's _config: %v", err)
	}
	scaledAny, err := ScaleDurations(defaults, scale)
	if err != nil {
		tb.Fatalf("chain: %v", err)
	}
	scaled := scaledAny.(map[string]any)
	for k, v := range overrides {
		if _, ok := scaled[k]; !ok {
			tb.Fatalf("chain: _config has no key %s to override", k)
		}
		scaled[k] = v
	}
	config, err := json.Marshal(scaled)
	if err != nil {
		tb.Fatal(err)
	}
	render := func(entry string) []byte {
		return jsonnetEval(tb, root, "-S", "--tla-code", "config="+string(config), filepath.Join("mixin", entry))
	}
	m := &Mixin{Scale: scale, Config: scaled, RuleFiles: map[string][]byte{
		"prometheus_alerts.yaml": render("alerts.jsonnet"),
		"prometheus_rules.yaml":  render("rules.jsonnet"),
	}}
	var inhibit struct {
		InhibitRules []map[string]any `json:"inhibit_rules"`
	}
	if err := yaml.UnmarshalStrict(render("inhibit_rules.jsonnet"), &inhibit); err != nil || len(inhibit.InhibitRules) == 0 {
		tb.Fatalf("chain: the mixin's inhibit rules: %v (%d rules)", err, len(inhibit.InhibitRules))
	}
	var route struct {
		Routes []map[string]any `json:"routes"`
	}
	if err := yaml.UnmarshalStrict(render("route.jsonnet"), &route); err != nil || len(route.Routes) == 0 {
		tb.Fatalf("chain: the mixin's recommended route: %v (%d routes)", err, len(route.Routes))
	}
	m.InhibitRules, m.Routes = inhibit.InhibitRules, route.Routes
	m.TargetDownFor, m.ProviderDownFor = m.Duration(tb, "targetDownFor"), m.Duration(tb, "providerDownFor")
	m.GroupWait, m.GroupInterval, m.RepeatInterval = m.Duration(tb, "alertmanagerGroupWait"), m.Duration(tb, "alertmanagerGroupInterval"), m.Duration(tb, "alertmanagerRepeatInterval")
	tb.Logf("chain: mixin rendered with every duration divided by %d: targetDownFor %v, providerDownFor %v, group_wait %v, group_interval %v, repeat_interval %v, Prometheus's interval %v",
		scale, m.TargetDownFor, m.ProviderDownFor, m.GroupWait, m.GroupInterval, m.RepeatInterval, m.Interval())
	return m
}

// Root finds the repository's root (the directory holding mixin/mixin.libsonnet) from the
// working directory up.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "mixin", "mixin.libsonnet")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no mixin/mixin.libsonnet in the working directory or above it")
		}
		dir = parent
	}
}

// jsonnetEval runs the tools module's jsonnet in the repository root with -J mixin.
func jsonnetEval(tb testing.TB, root string, args ...string) []byte {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(tb, "rendering the mixin needs Go on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append([]string{"tool", "-modfile=tools/go.mod", "jsonnet", "-J", "mixin"}, args...)...)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("chain: jsonnet %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// durationPattern is a Prometheus duration ("5m", "1h30m", "1500ms").
var durationPattern = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// ScaleDurations divides every duration string in v (a decoded JSON value) by scale, and
// leaves every other value as it is.
func ScaleDurations(v any, scale int) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			s, err := ScaleDurations(e, scale)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			s, err := ScaleDurations(e, scale)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case string:
		if !durationPattern.MatchString(v) {
			return v, nil
		}
		d, err := model.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("duration %q: %w", v, err)
		}
		scaled := time.Duration(d) / time.Duration(scale)
		if scaled%time.Second == 0 {
			return fmt.Sprintf("%ds", scaled/time.Second), nil
		}
		return fmt.Sprintf("%dms", scaled/time.Millisecond), nil
	default:
		return v, nil
	}
}

// WriteRuleFiles writes the mixin's rule files into a directory of their own under dir, with
// names of their own: Prometheus places a group in its interval by a hash of the group's name
// and file, so each placement k puts the groups elsewhere.
func (m *Mixin) WriteRuleFiles(tb testing.TB, dir string, k int) []string {
	tb.Helper()
	sub := filepath.Join(dir, fmt.Sprintf("placement-%d", k))
	if err := os.MkdirAll(sub, 0o755); err != nil {
		tb.Fatal(err)
	}
	var paths []string
	for name, content := range m.RuleFiles {
		p := filepath.Join(sub, fmt.Sprintf("%d-%s", k, name))
		if err := os.WriteFile(p, content, 0o644); err != nil {
			tb.Fatal(err)
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// StackOptions are the options of a Prometheus (and Alertmanager) of the chain, scaled.
func (m *Mixin) StackOptions(scrape []string, ruleFiles []string) promstack.Options {
	return promstack.Options{
		ScrapeTargets:      scrape,
		ScrapeInterval:     m.Interval(),
		EvaluationInterval: m.Interval(),
		ResendDelay:        m.Interval(),
		// Prometheus's first scrape comes at its discovery reload (5s by default), as long as
		// an alert's scaled for: (ExporterDown's 5m is 5s at 1/60) and it would page.
		DiscoveryReloadInterval: m.Interval(),
		RuleFiles:               ruleFiles,
		InhibitRules:            m.InhibitRules,
		Routes:                  m.Routes,
		// The top-level route, for an alert the recommended route does not catch.
		GroupWait:      m.GroupWait,
		GroupInterval:  m.GroupInterval,
		RepeatInterval: m.RepeatInterval,
	}
}
