package promstack

import (
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestPromDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:             "1s",
		90 * time.Second:        "90s",
		1500 * time.Millisecond: "1500ms",
		250 * time.Millisecond:  "250ms",
	} {
		if got := promDuration(d); got != want {
			t.Errorf("promDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestPrometheusConfig(t *testing.T) {
	opts := Options{
		ScrapeTargets:         []string{"127.0.0.1:9100", "[::1]:9101"},
		ScrapeInterval:        500 * time.Millisecond,
		RuleFiles:             []string{"testdata/rules.yml"},
		Scheme:                "https",
		TLSInsecureSkipVerify: true,
		BasicAuthUser:         "u",
		BasicAuthPassword:     "p",
		ExternalLabels:        map[string]string{"cluster": "c1"},
	}.withDefaults()
	out, err := prometheusConfig(opts, "127.0.0.1:9093")
	if err != nil {
		t.Fatal(err)
	}
	var cfg promConfig
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("rendered config is not YAML: %v\n%s", err, out)
	}
	if cfg.Global.ScrapeInterval != "500ms" || cfg.Global.ScrapeTimeout != "500ms" || cfg.Global.EvaluationInterval != "1s" {
		t.Errorf("global %+v: want interval and timeout 500ms, evaluation 1s", cfg.Global)
	}
	if cfg.Global.ExternalLabels["cluster"] != "c1" {
		t.Errorf("external labels %v", cfg.Global.ExternalLabels)
	}
	abs, _ := filepath.Abs("testdata/rules.yml")
	if len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != abs {
		t.Errorf("rule files %v, want [%s]", cfg.RuleFiles, abs)
	}
	if am := cfg.Alerting.Alertmanagers; len(am) != 1 || am[0].StaticConfigs[0].Targets[0] != "127.0.0.1:9093" {
		t.Errorf("alertmanagers %+v", am)
	}
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("scrape configs %+v, want one", cfg.ScrapeConfigs)
	}
	sc := cfg.ScrapeConfigs[0]
	if sc.JobName != JobName || sc.Scheme != "https" || sc.MetricsPath != "/metrics" {
		t.Errorf("scrape config %+v", sc)
	}
	if sc.TLSConfig == nil || !sc.TLSConfig.InsecureSkipVerify || sc.BasicAuth == nil || sc.BasicAuth.Username != "u" || sc.BasicAuth.Password != "p" {
		t.Errorf("tls %+v, basic auth %+v", sc.TLSConfig, sc.BasicAuth)
	}
	if got := sc.StaticConfigs[0].Targets; len(got) != 2 || got[1] != "[::1]:9101" {
		t.Errorf("targets %v", got)
	}

	// Without targets there is no scrape job, and plain http has no TLS or auth section.
	out, err = prometheusConfig(Options{}.withDefaults(), "127.0.0.1:9093")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "scrape_configs") || strings.Contains(string(out), "tls_config") {
		t.Errorf("config without targets:\n%s", out)
	}
}

// The pods of a namespace, by label, at a named port, each target labelled with its pod; pods
// whose containers have stopped are not targets.
func TestPrometheusConfigKubernetesPods(t *testing.T) {
	opts := Options{KubernetesPods: &KubernetesPods{Kubeconfig: "testdata/kubeconfig", Namespace: "phe",
		LabelSelector: "app.kubernetes.io/instance=phe", Port: "http-metrics"}}.withDefaults()
	out, err := prometheusConfig(opts, "127.0.0.1:9093")
	if err != nil {
		t.Fatal(err)
	}
	var cfg promConfig
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("rendered config is not YAML: %v\n%s", err, out)
	}
	if len(cfg.ScrapeConfigs) != 1 || len(cfg.ScrapeConfigs[0].KubernetesSD) != 1 || cfg.ScrapeConfigs[0].StaticConfigs != nil {
		t.Fatalf("scrape configs %+v, want one job discovering pods", cfg.ScrapeConfigs)
	}
	sc := cfg.ScrapeConfigs[0]
	abs, _ := filepath.Abs("testdata/kubeconfig")
	want := kubernetesSD{Role: "pod", KubeconfigFile: abs, Namespaces: kubernetesSDNames{Names: []string{"phe"}},
		Selectors: []kubernetesSDSels{{Role: "pod", Label: "app.kubernetes.io/instance=phe"}}}
	if !reflect.DeepEqual(sc.KubernetesSD[0], want) {
		t.Errorf("kubernetes_sd_configs %+v, want %+v", sc.KubernetesSD[0], want)
	}
	wantRelabel := []relabelConfig{
		{SourceLabels: []string{"__meta_kubernetes_pod_phase"}, Regex: "(Failed|Succeeded)", Action: "drop"},
		{SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: "http-metrics", Action: "keep"},
		{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
	}
	if sc.JobName != JobName || !reflect.DeepEqual(sc.RelabelConfigs, wantRelabel) {
		t.Errorf("job %q, relabel_configs %+v, want %q and %+v", sc.JobName, sc.RelabelConfigs, JobName, wantRelabel)
	}
}

func TestPrometheusConfigErrors(t *testing.T) {
	for name, opts := range map[string]Options{
		"scheme": {Scheme: "ftp"},
		"target": {ScrapeTargets: []string{"no-port"}},
		"both":   {ScrapeTargets: []string{"127.0.0.1:1"}, KubernetesPods: &KubernetesPods{Kubeconfig: "k", Namespace: "n", Port: "p"}},
		"pods":   {KubernetesPods: &KubernetesPods{Namespace: "n", Port: "p"}},
	} {
		if _, err := prometheusConfig(opts.withDefaults(), "127.0.0.1:9093"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestAlertmanagerConfig(t *testing.T) {
	out, err := alertmanagerConfig("http://127.0.0.1:1234", Options{GroupWait: 2 * time.Second}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	var cfg amConfig
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Route.Receiver != ReceiverName || cfg.Route.GroupWait != "2s" || cfg.Route.GroupInterval != "1s" || cfg.Route.RepeatInterval != "3600s" {
		t.Errorf("route %+v", cfg.Route)
	}
	if len(cfg.Receivers) != 1 || cfg.Receivers[0].Name != ReceiverName || cfg.Receivers[0].WebhookConfigs[0].URL != "http://127.0.0.1:1234/" || !cfg.Receivers[0].WebhookConfigs[0].SendResolved {
		t.Errorf("receivers %+v", cfg.Receivers)
	}
	if strings.Contains(string(out), "inhibit_rules") {
		t.Errorf("inhibit_rules written without any:\n%s", out)
	}

	rule := map[string]any{"source_matchers": []any{`alertname="A"`}, "target_matchers": []any{`alertname="B"`}, "equal": []any{"provider"}}
	out, err = alertmanagerConfig("http://127.0.0.1:1234", Options{InhibitRules: []map[string]any{rule}}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	cfg = amConfig{}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.InhibitRules) != 1 || !reflect.DeepEqual(cfg.InhibitRules[0], rule) {
		t.Errorf("inhibit_rules %+v, want [%+v]", cfg.InhibitRules, rule)
	}
	if len(cfg.Route.Routes) != 0 {
		t.Errorf("child routes written without any: %+v", cfg.Route.Routes)
	}

	child := map[string]any{"matchers": []any{`alertname=~"A.+"`}, "group_by": []any{"alertname", "provider"}, "group_wait": "3s"}
	out, err = alertmanagerConfig("http://127.0.0.1:1234", Options{Routes: []map[string]any{child}}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	cfg = amConfig{}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Route.Routes) != 1 || !reflect.DeepEqual(cfg.Route.Routes[0], child) || cfg.Route.Receiver != ReceiverName {
		t.Errorf("route %+v, want the receiver %s with the child route %+v", cfg.Route, ReceiverName, child)
	}
}

func TestDecodeQueryData(t *testing.T) {
	vec := `{"resultType":"vector","result":[
		{"metric":{"__name__":"up","job":"j"},"value":[1700000000.5,"1"]},
		{"metric":{"job":"k"},"value":[1700000000.5,"NaN"]}]}`
	got, err := decodeQueryData(json.RawMessage(vec))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Labels["job"] != "j" || got[0].Value != 1 || !math.IsNaN(got[1].Value) {
		t.Errorf("vector decoded as %v", got)
	}
	if want := time.UnixMilli(1700000000500); !got[0].Timestamp.Equal(want) {
		t.Errorf("timestamp %v, want %v", got[0].Timestamp, want)
	}
	if s := got[0].String(); s != `{__name__="up", job="j"} => 1` {
		t.Errorf("String() = %s", s)
	}

	got, err = decodeQueryData(json.RawMessage(`{"resultType":"scalar","result":[1700000000,"+Inf"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !math.IsInf(got[0].Value, 1) {
		t.Errorf("scalar decoded as %v", got)
	}

	for name, data := range map[string]string{
		"matrix":      `{"resultType":"matrix","result":[]}`,
		"bad value":   `{"resultType":"scalar","result":[1,"x"]}`,
		"number type": `{"resultType":"scalar","result":[1,2]}`,
	} {
		if _, err := decodeQueryData(json.RawMessage(data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDecodeMatrix(t *testing.T) {
	m := `{"resultType":"matrix","result":[
		{"metric":{"provider":"a"},"values":[[1700000000,"1"],[1700000002.5,"2"]]},
		{"metric":{"provider":"b"},"values":[]}]}`
	got, err := decodeMatrix(json.RawMessage(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Labels["provider"] != "a" || len(got[0].Points) != 2 || len(got[1].Points) != 0 {
		t.Fatalf("matrix decoded as %+v", got)
	}
	if p := got[0].Points[1]; !p.T.Equal(time.UnixMilli(1700000002500)) || p.V != 2 {
		t.Errorf("second point %+v", p)
	}
	for name, data := range map[string]string{
		"vector":    `{"resultType":"vector","result":[]}`,
		"bad value": `{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}`,
	} {
		if _, err := decodeMatrix(json.RawMessage(data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
