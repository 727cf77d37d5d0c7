// Command phe-demo is what `make demo` runs: it starts the local environment of package demo
// (a Kubernetes API server with the ProviderHealth CRD, KVM hosts, the GCE wire server), Prometheus
// with the mixin's rules and Alertmanager, and runs the exporter with the CRD writer in the
// foreground, all at fixed local addresses. It prints what to open and a command that breaks a KVM
// host and one that repairs it, then the alerts Alertmanager sends as they come. Ctrl-C (SIGINT)
// or SIGTERM stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/demo"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// readyTimeout bounds the wait for every target to be up, once everything runs.
const readyTimeout = 2 * time.Minute

type options struct {
	exporter         string
	exporterAddr     string
	prometheusAddr   string
	alertmanagerAddr string
	repo             string
	mixinConfig      string
	kvmHosts         int
	interval         time.Duration
}

// flags defines the launcher's flags into o.
func flags(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("phe-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.exporter, "exporter", "./provider_health_exporter", "the exporter binary to run")
	fs.StringVar(&o.exporterAddr, "exporter.listen-address", "127.0.0.1:9847", "where the exporter listens")
	fs.StringVar(&o.prometheusAddr, "prometheus.listen-address", "127.0.0.1:9090", "where Prometheus listens")
	fs.StringVar(&o.alertmanagerAddr, "alertmanager.listen-address", "127.0.0.1:9093", "where Alertmanager listens")
	fs.StringVar(&o.repo, "repo", ".", "the repository's top directory: the CRD (deploy/crd/) and the mixin (mixin/) are read from it")
	fs.StringVar(&o.mixinConfig, "mixin.config", demo.DemoWindows, "the mixin's _config overrides (jsonnet) for the rules Prometheus loads")
	fs.IntVar(&o.kvmHosts, "kvm-hosts", 3, "how many KVM hosts to start")
	fs.DurationVar(&o.interval, "provider-check-interval", 10*time.Second, "the exporter's --provider-check-interval")
	return fs
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flags(&o, stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := launch(o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

// preflight finds what would make the start fail half way, before anything starts: a port in
// use first, the most likely on a machine that runs other things.
func preflight(o options) error {
	for _, p := range []struct{ what, addr string }{
		{"the exporter", o.exporterAddr}, {"Prometheus", o.prometheusAddr}, {"Alertmanager", o.alertmanagerAddr},
	} {
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			_, port, _ := net.SplitHostPort(p.addr)
			return fmt.Errorf("%s cannot listen on %s: %w. Stop what uses port %s (find it with: ss -ltnp 'sport = :%s'), or pick another address (-help)",
				p.what, p.addr, err, port, port)
		}
		_ = l.Close()
	}
	if _, err := os.Stat(o.exporter); err != nil {
		return fmt.Errorf("the exporter binary: %w (make demo builds it; or run make build)", err)
	}
	for _, f := range []string{o.crdFile(), filepath.Join(o.repo, "mixin", "alerts.jsonnet")} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w (run the demo from the repository's top directory, or give -repo)", err)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("run the demo as root: its KVM hosts are network namespaces with their own sshd and libvirtd")
	}
	return nil
}

func (o options) crdFile() string {
	return filepath.Join(o.repo, "deploy", "crd")
}

func launch(o options, stdout, stderr io.Writer) (err error) {
	if err := preflight(o); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	progress := func(format string, args ...any) { fmt.Fprintf(stderr, "demo: "+format+"\n", args...) }

	s, err := demo.NewSession(stderr)
	if err != nil {
		return err
	}
	defer func() {
		progress("stopping everything the demo started")
		if cerr := s.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stop: %w", cerr))
			return
		}
		progress("stopped: every process it started is reaped, its temporary directories removed")
	}()

	var env *demo.Env
	var exporter *testenv.Daemon
	var stack *promstack.Stack
	var rules []string
	steps := []func(){
		func() {
			progress("rendering the mixin's alerts and rules with %s", o.mixinConfig)
			rules = demo.MixinRules(s, o.repo, o.mixinConfig)
		},
		func() {
			env = demo.Start(s, demo.Options{CRDFile: o.crdFile(), KVMHosts: o.kvmHosts, Logf: progress})
		},
		func() {
			exporter = startExporter(s, o, env)
			progress("exporter started at http://%s (pid %d)", o.exporterAddr, exporter.PID())
		},
		func() {
			stack = promstack.Start(s, promstack.Options{
				ScrapeTargets:    []string{o.exporterAddr},
				ScrapeInterval:   5 * time.Second,
				RuleFiles:        rules,
				PrometheusAddr:   o.prometheusAddr,
				AlertmanagerAddr: o.alertmanagerAddr,
				GroupWait:        5 * time.Second,
				GroupInterval:    10 * time.Second,
			})
			progress("Prometheus ready at %s with the mixin's rules, Alertmanager at %s", stack.PrometheusURL, stack.AlertmanagerURL)
		},
		func() {
			progress("waiting for Prometheus to scrape the exporter and for every target to be up")
			stack.WaitTargetUp(s, o.exporterAddr, readyTimeout)
			stack.WaitForQuery(s, `count(proxy_operator_provider_target_up == 1)`, func(r []promstack.Sample) bool {
				return len(r) == 1 && int(r[0].Value) == env.Targets()
			}, readyTimeout)
		},
	}
	for _, step := range steps {
		if ctx.Err() != nil {
			return errors.New("interrupted while starting")
		}
		if err := s.Run(step); err != nil {
			return err
		}
	}
	banner(stdout, o, env, stack)

	// Until Ctrl-C: say which alerts Alertmanager sends, and notice an exporter that ends.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seen := 0
	for {
		select {
		case <-ctx.Done():
			stopExporter(exporter, progress)
			return nil
		case <-exporter.Done():
			return fmt.Errorf("the exporter exited: %v", exporter.WaitErr())
		case <-tick.C:
			ns := stack.Notifications()
			for _, n := range ns[seen:] {
				for _, a := range n.Alerts {
					fmt.Fprintf(stdout, "demo: alert %s %s %s: %s\n", a.Status, a.Labels["alertname"], labels(a.Labels), a.Annotations["description"])
				}
			}
			seen = len(ns)
		}
	}
}

// startExporter runs the exporter binary with its output on this process's stdout.
func startExporter(s *demo.Session, o options, env *demo.Env) *testenv.Daemon {
	d, err := testenv.StartDaemonTo("exporter", o.exporter, []string{
		"--web.listen-address=" + o.exporterAddr,
		"--config.file=" + env.ProvidersFile,
		"--provider-check-interval=" + o.interval.String(),
		"--crd.enabled",
		"--crd.kubeconfig=" + env.Kube.Kubeconfig,
	}, os.Stdout)
	if err != nil {
		s.Fatalf("start the exporter: %v", err)
	}
	s.Cleanup(func() {
		if err := d.Kill(30 * time.Second); err != nil {
			s.Errorf("stop the exporter: %v", err)
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		if d.Exited() {
			s.Fatalf("the exporter exited at start: %v", d.WaitErr())
		}
		resp, err := client.Get("http://" + o.exporterAddr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			s.Fatalf("the exporter is not ready at http://%s/-/ready after %s", o.exporterAddr, readyTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopExporter lets the exporter shut down cleanly (SIGTERM), then kills it if it has not.
func stopExporter(d *testenv.Daemon, progress func(string, ...any)) {
	if d.Exited() {
		return
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.Done():
	case <-time.After(20 * time.Second):
		progress("the exporter did not stop within 20s of SIGTERM; killing it")
	}
}

func labels(m map[string]string) string {
	var kv []string
	for k, v := range m {
		if k != "alertname" {
			kv = append(kv, k+"="+v)
		}
	}
	sort.Strings(kv)
	return "{" + strings.Join(kv, ", ") + "}"
}

// banner prints what to open and how to break and repair a host.
func banner(w io.Writer, o options, env *demo.Env, stack *promstack.Stack) {
	last := len(env.Fleet.Hosts) - 1
	host := env.Fleet.Hosts[last]
	fmt.Fprintf(w, `
demo: ready. Every target is up: %d targets of 4 providers (%s, %s, %s, %s).

  Status page         http://%s/
  Metrics             http://%s/metrics
  Prometheus alerts   %s/api/v1/alerts  (the API: this build of Prometheus serves no web UI)
  Alertmanager        %s/#/alerts
  ProviderHealth      %s

Break KVM host %s (%s): its SSH port answers every packet with a reset:
  %s
Repair it:
  %s
The next check (every %s) reads TCPUnreachable; the ProviderHealthTargetDown alert fires after
its demo-sized window and resolves after the repair. Alerts are printed here as Alertmanager sends them.

Press Ctrl-C to stop everything.
`, env.Targets(), demo.KubernetesProvider, demo.GCPProvider, demo.KVMProvider, demo.VSphereProvider,
		o.exporterAddr, o.exporterAddr, stack.PrometheusURL, stack.AlertmanagerURL, kubectlLine(env.Kube.Kubeconfig, exec.LookPath),
		host.Name, host.Addr, env.BreakCommand(last), env.RepairCommand(last), o.interval)
}

// kubectlLine is the banner's kubectl command; on a machine without kubectl (a fresh Debian
// machine has none, and make test-deps does not install it) it says so instead of printing a
// command that fails with "command not found".
func kubectlLine(kubeconfig string, lookPath func(string) (string, error)) string {
	cmd := "kubectl --kubeconfig " + kubeconfig + " get ph"
	if _, err := lookPath("kubectl"); err != nil {
		return cmd + "\n                      (kubectl is not installed: see docs/demo.md, \"What you need\")"
	}
	return cmd
}
