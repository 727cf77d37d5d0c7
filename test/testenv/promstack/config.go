package promstack

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"
)

// The types below are the subset of Prometheus's and Alertmanager's configuration files the
// stack writes; field names follow their documentation.

type promConfig struct {
	Global        promGlobal     `yaml:"global"`
	RuleFiles     []string       `yaml:"rule_files,omitempty"`
	Alerting      promAlerting   `yaml:"alerting"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs,omitempty"`
}

type promGlobal struct {
	ScrapeInterval     string            `yaml:"scrape_interval"`
	ScrapeTimeout      string            `yaml:"scrape_timeout"`
	EvaluationInterval string            `yaml:"evaluation_interval"`
	ExternalLabels     map[string]string `yaml:"external_labels,omitempty"`
}

type promAlerting struct {
	Alertmanagers []amTarget `yaml:"alertmanagers"`
}

type amTarget struct {
	APIVersion    string         `yaml:"api_version"`
	Timeout       string         `yaml:"timeout"`
	StaticConfigs []staticConfig `yaml:"static_configs"`
}

type staticConfig struct {
	Targets []string `yaml:"targets"`
}

type scrapeConfig struct {
	JobName        string          `yaml:"job_name"`
	Scheme         string          `yaml:"scheme"`
	MetricsPath    string          `yaml:"metrics_path"`
	TLSConfig      *tlsConfig      `yaml:"tls_config,omitempty"`
	BasicAuth      *basicAuth      `yaml:"basic_auth,omitempty"`
	StaticConfigs  []staticConfig  `yaml:"static_configs,omitempty"`
	KubernetesSD   []kubernetesSD  `yaml:"kubernetes_sd_configs,omitempty"`
	RelabelConfigs []relabelConfig `yaml:"relabel_configs,omitempty"`
}

type kubernetesSD struct {
	Role           string             `yaml:"role"`
	KubeconfigFile string             `yaml:"kubeconfig_file"`
	Namespaces     kubernetesSDNames  `yaml:"namespaces"`
	Selectors      []kubernetesSDSels `yaml:"selectors,omitempty"`
}

type kubernetesSDNames struct {
	Names []string `yaml:"names"`
}

type kubernetesSDSels struct {
	Role  string `yaml:"role"`
	Label string `yaml:"label"`
}

type relabelConfig struct {
	SourceLabels []string `yaml:"source_labels,omitempty"`
	Regex        string   `yaml:"regex,omitempty"`
	Action       string   `yaml:"action,omitempty"`
	TargetLabel  string   `yaml:"target_label,omitempty"`
}

type tlsConfig struct {
	CAFile             string `yaml:"ca_file,omitempty"`
	ServerName         string `yaml:"server_name,omitempty"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify,omitempty"`
}

type basicAuth struct {
	Username string `yaml:"username"`
	Password string `yaml:"password,omitempty"`
}

// promDuration renders d in Prometheus's duration syntax, which has no fractions
// ("1500ms", not "1.5s").
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// prometheusConfig renders prometheus.yml for opts (defaults already applied), sending alerts
// to the Alertmanager at amAddr (host:port).
func prometheusConfig(opts Options, amAddr string) ([]byte, error) {
	if opts.Scheme != "http" && opts.Scheme != "https" {
		return nil, fmt.Errorf("scrape scheme %q: want http or https", opts.Scheme)
	}
	if opts.ScrapeInterval < time.Millisecond || opts.EvaluationInterval < time.Millisecond {
		return nil, fmt.Errorf("scrape interval %v and evaluation interval %v must be at least 1ms", opts.ScrapeInterval, opts.EvaluationInterval)
	}
	if len(opts.ScrapeTargets) > 0 && opts.KubernetesPods != nil {
		// The pods' relabelling (keep a port by name) would drop every static target.
		return nil, errors.New("scrape targets and kubernetes pods: give one or the other")
	}
	for _, t := range opts.ScrapeTargets {
		if _, _, err := net.SplitHostPort(t); err != nil {
			return nil, fmt.Errorf("scrape target %q: want host:port: %w", t, err)
		}
	}
	rules := make([]string, 0, len(opts.RuleFiles))
	for _, f := range opts.RuleFiles {
		// Prometheus resolves relative rule paths against its config file's directory, a
		// temporary one; the test means its own working directory.
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("rule file %q: %w", f, err)
		}
		rules = append(rules, abs)
	}
	cfg := promConfig{
		Global: promGlobal{
			ScrapeInterval: promDuration(opts.ScrapeInterval),
			// The default timeout (10s) is longer than a short interval, which Prometheus refuses.
			ScrapeTimeout:      promDuration(opts.ScrapeInterval),
			EvaluationInterval: promDuration(opts.EvaluationInterval),
			ExternalLabels:     opts.ExternalLabels,
		},
		RuleFiles: rules,
		Alerting: promAlerting{Alertmanagers: []amTarget{{
			APIVersion:    "v2",
			Timeout:       "5s",
			StaticConfigs: []staticConfig{{Targets: []string{amAddr}}},
		}}},
	}
	if len(opts.ScrapeTargets) > 0 || opts.KubernetesPods != nil {
		sc := scrapeConfig{
			JobName:     JobName,
			Scheme:      opts.Scheme,
			MetricsPath: opts.MetricsPath,
		}
		if len(opts.ScrapeTargets) > 0 {
			sc.StaticConfigs = []staticConfig{{Targets: opts.ScrapeTargets}}
		}
		if k := opts.KubernetesPods; k != nil {
			if k.Kubeconfig == "" || k.Namespace == "" || k.Port == "" {
				return nil, fmt.Errorf("kubernetes pods %+v: a kubeconfig, a namespace and a port name are needed", *k)
			}
			kubeconfig, err := filepath.Abs(k.Kubeconfig)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %q: %w", k.Kubeconfig, err)
			}
			sd := kubernetesSD{Role: "pod", KubeconfigFile: kubeconfig, Namespaces: kubernetesSDNames{Names: []string{k.Namespace}}}
			if k.LabelSelector != "" {
				sd.Selectors = []kubernetesSDSels{{Role: "pod", Label: k.LabelSelector}}
			}
			sc.KubernetesSD = []kubernetesSD{sd}
			// The discovery gives a target per container port: the one named Port is scraped.
			// A pod whose containers have all stopped (phase Succeeded or Failed: the kubelet
			// sets it on a deleted pod before the object goes) is no target any more, as the
			// Prometheus Operator drops it for a PodMonitor or ServiceMonitor: a pod that has
			// exited is not an exporter that cannot be scraped.
			sc.RelabelConfigs = []relabelConfig{
				{SourceLabels: []string{"__meta_kubernetes_pod_phase"}, Regex: "(Failed|Succeeded)", Action: "drop"},
				{SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: k.Port, Action: "keep"},
				{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
			}
		}
		if opts.TLSInsecureSkipVerify || opts.TLSCAFile != "" || opts.TLSServerName != "" {
			sc.TLSConfig = &tlsConfig{
				CAFile:             opts.TLSCAFile,
				ServerName:         opts.TLSServerName,
				InsecureSkipVerify: opts.TLSInsecureSkipVerify,
			}
		}
		if opts.BasicAuthUser != "" {
			sc.BasicAuth = &basicAuth{Username: opts.BasicAuthUser, Password: opts.BasicAuthPassword}
		}
		cfg.ScrapeConfigs = []scrapeConfig{sc}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render prometheus config: %w", err)
	}
	return out, nil
}

type amConfig struct {
	Route        amRoute          `yaml:"route"`
	Receivers    []amReceiver     `yaml:"receivers"`
	InhibitRules []map[string]any `yaml:"inhibit_rules,omitempty"`
}

type amRoute struct {
	Receiver       string           `yaml:"receiver"`
	GroupBy        []string         `yaml:"group_by"`
	GroupWait      string           `yaml:"group_wait"`
	GroupInterval  string           `yaml:"group_interval"`
	RepeatInterval string           `yaml:"repeat_interval"`
	Routes         []map[string]any `yaml:"routes,omitempty"`
}

type amReceiver struct {
	Name           string          `yaml:"name"`
	WebhookConfigs []webhookConfig `yaml:"webhook_configs"`
}

type webhookConfig struct {
	URL          string `yaml:"url"`
	SendResolved bool   `yaml:"send_resolved"`
}

// alertmanagerConfig renders alertmanager.yml: one route, grouped by every label so each alert
// is notified on its own, to the webhook at webhookURL, with opts.Routes as its child routes,
// and opts.InhibitRules.
func alertmanagerConfig(webhookURL string, opts Options) ([]byte, error) {
	cfg := amConfig{
		InhibitRules: opts.InhibitRules,
		Route: amRoute{
			Receiver:       ReceiverName,
			GroupBy:        []string{"..."},
			GroupWait:      promDuration(opts.GroupWait),
			GroupInterval:  promDuration(opts.GroupInterval),
			RepeatInterval: promDuration(opts.RepeatInterval),
			Routes:         opts.Routes,
		},
		Receivers: []amReceiver{{
			Name:           ReceiverName,
			WebhookConfigs: []webhookConfig{{URL: webhookURL + "/", SendResolved: true}},
		}},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render alertmanager config: %w", err)
	}
	return out, nil
}
