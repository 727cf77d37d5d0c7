package charts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/chain"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/cluster"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/toolbuild"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// nodeProviders are the in-cluster kubernetes providers the e2e release checks: each lists
// something else, so that the shard spreads them over the replicas.
var nodeProviders = []string{"pods-all", "pods-kube-system", "pods-phe", "nodes", "services"}

// nodeKVMHosts is the number of KVM hosts (kvmhost's: a real sshd and libvirtd each, in a
// network namespace of the node's host) of the release's kvm provider, which the pods reach over
// the pod network: the bridge's gateway routes to the hosts' veths, and the CNI plugin's ipMasq
// gives the pods' connections the address of the veth they leave by.
const nodeKVMHosts = 3

// nodeWant is the number of targets of each provider of the release.
func nodeWant() map[string]int {
	want := map[string]int{"kvm": nodeKVMHosts}
	for _, p := range nodeProviders {
		want[p] = 1
	}
	return want
}

// nodeProvidersJSON is the release's config.providers: nodeProviders, and a kvm provider of the
// fleet's hosts with the credentials where the chart mounts credentials.ssh.
func nodeProvidersJSON(fleet testenv.KVMBlock) string {
	var ps []map[string]any
	for _, name := range nodeProviders {
		k := map[string]any{}
		switch name {
		case "pods-kube-system":
			k["namespace"] = "kube-system"
		case "pods-phe":
			k["namespace"] = "phe"
		case "nodes":
			k["resource"] = "nodes"
		case "services":
			k["resource"] = "services"
		}
		ps = append(ps, map[string]any{"name": name, "type": "kubernetes", "kubernetes": k})
	}
	var hosts []map[string]string
	for _, h := range fleet.Hosts {
		hosts = append(hosts, map[string]string{"address": h.Address, "name": h.Name})
	}
	ps = append(ps, map[string]any{"name": "kvm", "type": "kvm", "kvm": map[string]any{
		"user":           fleet.User,
		"privateKeyFile": "/etc/phe/ssh/id_ed25519",
		"knownHostsFile": "/etc/phe/ssh/known_hosts",
		"socket":         fleet.Socket,
		"storagePool":    fleet.StoragePool,
		"hosts":          hosts,
	}})
	b, _ := json.Marshal(ps)
	return string(b)
}

// TestChartOnNode: the chart on a one-node Kubernetes of real parts (make cluster's,
// test/testenv/cluster), the image make image builds running in its pods: helm install with
// three sharded replicas and the writer on, in-cluster kubernetes providers and a kvm provider
// of real KVM hosts (kvmhost) reached over the pod network with the chart's SSH credentials;
// pods Ready, every ProviderHealth object whole; a Prometheus (promstack's) discovering the pods
// through kubernetes_sd, with the mixin's rules and alerts (durations divided by
// nodeMixinScale); through a pod's deletion, a helm upgrade's rollout and a node drain, every
// target of every provider served by some pod at every evaluation (every 2 s),
// every pod discovered and scraped, no alert firing; the drain held by the
// PodDisruptionBudget at the last pod (minAvailable 1); helm uninstall leaves no Lease and no
// object of the release.
func TestChartOnNode(t *testing.T) {
	testenv.SkipIfShort(t, "starts a one-node Kubernetes (kubelet, containerd, CNI) and builds the image")
	if missing := cluster.Requirements(); len(missing) > 0 {
		testenv.Unavailable(t, "a one-node cluster needs %s", strings.Join(missing, ", "))
	}
	h := newHelm(t)
	root := testutil.RepoRoot(t)
	ref, err := cluster.ChartImage(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// The image of the host's platform, as make cluster loads it; .build/image is not rebuilt by
	// another test (TestImage) until the cluster has imported it.
	unlockImage := testenv.LockImage(t, root)
	if out, err := exec.CommandContext(ctx, "make", "-C", root, "image", "PLATFORMS=linux/"+runtime.GOARCH).CombinedOutput(); err != nil {
		unlockImage()
		t.Fatalf("make image: %v\n%s", err, testenv.Tail(string(out), 30))
	}
	buildCtx, buildCancel := toolbuild.BuildContext(t)
	defer buildCancel()
	logf := func(format string, args ...any) {
		t.Logf(format, args...)
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
	c, err := cluster.Start(buildCtx, cluster.Options{Dir: t.TempDir(), Root: root, ImageLayout: root + "/.build/image", ImageName: ref, Logf: logf})
	unlockImage()
	switch {
	case errors.Is(err, cluster.ErrBusy), errors.Is(err, toolbuild.ErrNotBuilt), errors.Is(err, toolbuild.ErrNoGo), errors.Is(err, toolbuild.ErrNoModuleProxy):
		testenv.Unavailable(t, "%v", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
		if left := c.Leftovers(); len(left) > 0 {
			t.Errorf("the cluster left behind: %s", strings.Join(left, "; "))
		}
	})
	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "kubectl", args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustKubectl := func(args ...string) string {
		t.Helper()
		out, err := kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	helmRun := func(args ...string) string {
		t.Helper()
		out, err := h.run(append(args, "--kubeconfig", c.Kubeconfig)...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out, mustKubectl("get", "pods,events", "-n", "phe", "-o", "wide"))
		}
		return out
	}

	// The kubernetes providers list in every namespace: the pods may read what view grants.
	mustKubectl("create", "namespace", "phe")
	mustKubectl("create", "clusterrolebinding", "phe-view", "--clusterrole=view", "--serviceaccount=phe:phe-provider-health-exporter")
	mustKubectl("create", "clusterrole", "phe-nodes", "--verb=list", "--resource=nodes")
	mustKubectl("create", "clusterrolebinding", "phe-nodes", "--clusterrole=phe-nodes", "--serviceaccount=phe:phe-provider-health-exporter")
	installed := time.Now()
	fleet := kvmhost.Start(t, nodeKVMHosts)
	want := nodeWant()
	helmRun("install", "phe", chartDir(t), "--namespace", "phe", "--set", "replicas=3",
		"--set", "shard.enabled=true", "--set", "crd.enabled=true", "--set", "crd.leaderElect=true",
		"--set-json", "config.providers="+nodeProvidersJSON(fleet.KVMConfig()),
		"--set-file", "credentials.ssh.privateKey="+fleet.ClientKeyPath, "--set-file", "credentials.ssh.knownHosts="+fleet.KnownHostsPath,
		"--wait", "--timeout", "5m")
	t.Logf("helm install: 3 pods Ready %s after the install began", time.Since(installed).Round(time.Second))
	if n := len(readyPods(t, kubectl)); n != 3 {
		t.Fatalf("%d pods Ready after helm install --wait, want 3", n)
	}

	// Every provider's object, whole: Ready, with its targets (the kvm provider's from every
	// replica's share): the pods reached the KVM hosts and verified their keys.
	phWhole := func() {
		t.Helper()
		eventuallyNode(t, 2*time.Minute, "every ProviderHealth object Ready with its targets", func() (bool, string) {
			out, err := kubectl("get", "ph", "-o", "json")
			if err != nil {
				return false, out
			}
			var list struct {
				Items []struct {
					Metadata struct{ Name string }
					Status   struct {
						Targets    []struct{ Name string }
						Conditions []struct{ Type, Status, Reason string }
					}
				}
			}
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				return false, err.Error()
			}
			ready := map[string]bool{}
			for _, o := range list.Items {
				for _, cond := range o.Status.Conditions {
					if cond.Type == "Ready" && cond.Status == "True" && len(o.Status.Targets) == want[o.Metadata.Name] {
						ready[o.Metadata.Name] = true
					}
				}
			}
			for p := range want {
				if !ready[p] {
					return false, out
				}
			}
			return len(list.Items) == len(want), out
		})
	}
	phWhole()

	// Prometheus on the host (the pod network is the host's: its bridge routes the pods'
	// addresses) discovers the release's pods through kubernetes_sd with the admin's
	// credentials and scrapes them, with the mixin's rules and alerts, every duration of the
	// mixin divided by nodeMixinScale (a scrape and an evaluation every 2 s, an alert's for: of
	// 5m 10 s) but ExporterDown's, which stays above what a pod's exit takes on a node whatever
	// the scale: a pod that has exited is a target that cannot be scraped until the kubelet
	// reports it terminal (seen here: 4 to 6 s), and the pods a rollout replaces one after
	// another are such targets one after another, so that "a replica is not scraped" holds
	// for a rollout's length with no replica down longer than a few seconds. So does
	// ShardMembershipDisagrees': a pod that has left exports the members it saw last while it
	// lingers and until it is no target, and a rollout's pods linger one after another, so
	// that two replicas disagree for a rollout's length with no replica wrong for longer than
	// its own exit.
	mixin := chain.RenderWith(t, nodeMixinScale, map[string]any{"exporterDownFor": "1m", "shardMembersDisagreeFor": "1m"})
	opts := mixin.StackOptions(nil, mixin.WriteRuleFiles(t, t.TempDir(), 0))
	opts.KubernetesPods = &promstack.KubernetesPods{Kubeconfig: c.Kubeconfig, Namespace: "phe",
		LabelSelector: "app.kubernetes.io/instance=phe", Port: "http-metrics"}
	stack := promstack.Start(t, opts)
	interval := mixin.Interval()
	seen := map[string]bool{}
	see := func(pods []string) {
		for _, p := range pods {
			seen[p] = true
		}
	}
	pods := readyPods(t, kubectl)
	see(pods)
	waitPodsUp(t, stack, pods, 2*time.Minute)
	stack.WaitForQuery(t, nodeServedQuery, func(s []promstack.Sample) bool { return servedAsWanted(s, want) }, time.Minute)
	logs := followPodLogs(ctx, t, c.Kubeconfig)
	from := time.Now()

	logs.follow(pods)
	mustKubectl("delete", "pod", "-n", "phe", pods[0], "--wait=true")
	waitReadyPods(t, kubectl, 3)
	see(readyPods(t, kubectl))
	logs.follow(readyPods(t, kubectl))
	helmRun("upgrade", "phe", chartDir(t), "--namespace", "phe", "--reuse-values", "--set", "podAnnotations.rollout=one", "--wait", "--timeout", "5m")
	waitReadyPods(t, kubectl, 3)
	see(readyPods(t, kubectl))
	logs.follow(readyPods(t, kubectl))

	// The drain: the PodDisruptionBudget (minAvailable 1) holds the last pod; the node is
	// cordoned, so the evicted pods' replacements stay Pending.
	drained := time.Now()
	out, err := kubectl("drain", cluster.NodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")
	if err == nil {
		t.Errorf("kubectl drain evicted every pod despite the PodDisruptionBudget:\n%s", out)
	} else if !strings.Contains(out, "disruption budget") {
		t.Errorf("kubectl drain failed, but not held by the disruption budget: %v\n%s", err, out)
	}
	if n := len(readyPods(t, kubectl)); n != 1 {
		t.Errorf("after the held drain %d pods are Ready, want 1 (minAvailable)", n)
	}
	time.Sleep(3 * interval) // three evaluations with the last pod alone
	mustKubectl("uncordon", cluster.NodeName)
	waitReadyPods(t, kubectl, 3)
	pods = readyPods(t, kubectl)
	see(pods)
	to := time.Now()
	phWhole()
	t.Logf("through a pod's deletion, a rollout (%s) and a drain (%s): %s", drained.Sub(from).Round(time.Second), to.Sub(drained).Round(time.Second), to.Sub(from).Round(time.Second))
	judgeNodePrometheus(ctx, t, stack, interval, from, to, want, pods, seen, logs)

	// helm uninstall: no Lease and no object of the release stays (the ProviderHealth objects
	// and the CRD do: helm.sh/resource-policy keep, as documented).
	helmRun("uninstall", "phe", "--namespace", "phe", "--wait", "--timeout", "3m")
	eventuallyNode(t, 2*time.Minute, "no Lease and no object of the release", func() (bool, string) {
		leases, err1 := kubectl("get", "leases", "-n", "phe", "-o", "name")
		objs, err2 := kubectl("get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,poddisruptionbudgets", "-n", "phe",
			"-l", "app.kubernetes.io/instance=phe", "-o", "name")
		cluster, err3 := kubectl("get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/instance=phe", "-o", "name")
		left := strings.TrimSpace(leases + objs + cluster)
		return err1 == nil && err2 == nil && err3 == nil && left == "", left + "\n" + mustKubectl("get", "leases", "-n", "phe", "-o", "yaml")
	})
}

func readyPods(t *testing.T, kubectl func(...string) (string, error)) []string {
	t.Helper()
	out, err := kubectl("get", "pods", "-n", "phe", "-l", "app.kubernetes.io/instance=phe", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get pods: %v\n%s", err, out)
	}
	return parseReadyPods(out)
}

func parseReadyPods(out string) []string {
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string
				DeletionTimestamp *string
			}
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if json.Unmarshal([]byte(out), &list) != nil {
		return nil
	}
	var names []string
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" && p.Metadata.DeletionTimestamp == nil {
				names = append(names, p.Metadata.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func waitReadyPods(t *testing.T, kubectl func(...string) (string, error), n int) {
	t.Helper()
	eventuallyNode(t, 3*time.Minute, fmt.Sprintf("%d pods Ready", n), func() (bool, string) {
		out, _ := kubectl("get", "pods", "-n", "phe", "-o", "wide")
		return len(readyPods(t, kubectl)) == n, out
	})
}

func eventuallyNode(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s\n%s", timeout, what, state)
		}
		time.Sleep(time.Second)
	}
}

// nodeMixinScale divides every duration of the mixin in TestChartOnNode: Prometheus's 1m
// default interval is 2 s, an alert's for: of 5m is 10 s, so that an alert the rollout or the
// drain would raise in production fires within the test.
const nodeMixinScale = 30

// nodePendingAllowed are the alerts that may be pending (never firing) through a pod's
// deletion, a rollout and a drain, each with why: their for: (divided by nodeMixinScale) is
// what keeps them from firing on these moments in production as here.
var nodePendingAllowed = map[string]string{
	"ProviderHealthExporterDown": "a pod that has exited stays a scrape target until the kubelet reports it terminal " +
		"(phase Succeeded), a few seconds, one pod after another through a rollout; for: 5m, here 1m",
	"ProviderHealthShardMembershipDisagrees": "the replicas see a member come or go at their own next read of the Leases, " +
		"and a pod that left keeps exporting the members it saw last while it lingers, one pod after another through a " +
		"rollout; for: 5m, here 1m",
	"ProviderHealthCRDWriterNoLeader": "from the writer's release by a leaving leader to another replica's next attempt " +
		"to lead (a retry period or two, docs/crd.md)",
}

// nodeServedQuery is the mixin's count of each provider's targets reported by some pod, as
// recorded at every evaluation: a provider is missing from it when no pod serves it, and
// counts fewer targets than it has when no pod serves some of them.
const nodeServedQuery = `provider:proxy_operator_provider_target_up:count{job="` + promstack.JobName + `"}`

// servedAsWanted tells whether samples of nodeServedQuery count every target of want.
func servedAsWanted(s []promstack.Sample, want map[string]int) bool {
	n := 0
	for _, x := range s {
		if x.Value == float64(want[x.Labels["provider"]]) {
			n++
		}
	}
	return n == len(want) && len(s) == len(want)
}

// judgeNodePrometheus asserts what Prometheus saw of the release from from to to: every
// target of every provider (want) served by some pod at every evaluation, every pod the release ran (seen) discovered
// and scraped, the pods running now up, and no alert of the mixin firing (nor a notification).
func judgeNodePrometheus(ctx context.Context, t *testing.T, stack *promstack.Stack, interval time.Duration, from, to time.Time, want map[string]int, pods []string, seen map[string]bool, logs *podLogs) {
	t.Helper()
	// Whole seconds, so that the steps of a range query fall where asked; the first after
	// from, when every provider was served.
	from, to = from.Truncate(time.Second).Add(time.Second), to.Truncate(time.Second)
	// The evaluations up to to are in.
	stack.WaitForQuery(t, "max(timestamp("+nodeServedQuery+"))", func(s []promstack.Sample) bool {
		return len(s) == 1 && s[0].Value >= float64(to.Unix())
	}, time.Minute)

	// Each step of the range holds the evaluation before it: a provider missing at an
	// evaluation (its series stale there) is missing at the step after it.
	series, err := stack.QueryRange(ctx, nodeServedQuery, from, to, interval)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]map[int64]float64{}
	for _, se := range series {
		p := se.Labels["provider"]
		if have[p] == nil {
			have[p] = map[int64]float64{}
		}
		for _, pt := range se.Points {
			have[p][pt.T.UnixMilli()] = pt.V
		}
	}
	providers := make([]string, 0, len(want))
	for p := range want {
		providers = append(providers, p)
	}
	slices.Sort(providers)
	steps := 0
	var lastGap time.Time
	for ts := from; !ts.After(to); ts = ts.Add(interval) {
		steps++
		var missing []string
		for _, p := range providers {
			if n, ok := have[p][ts.UnixMilli()]; !ok || n != float64(want[p]) {
				missing = append(missing, fmt.Sprintf("%s (%g of %d targets)", p, n, want[p]))
			}
		}
		if len(missing) == 0 {
			continue
		}
		t.Errorf("%s: targets of %v served by no pod (%s at the evaluation before)", ts.Format("15:04:05"), missing, nodeServedQuery)
		if ts.Sub(lastGap) > 30*time.Second {
			t.Logf("around it:\n%s\n%s", nodeTimeline(ctx, stack, ts.Add(-20*time.Second), ts.Add(10*time.Second), interval), logs.between(ts.Add(-30*time.Second), ts.Add(10*time.Second)))
		}
		lastGap = ts
	}
	t.Logf("%d evaluations (every %s) judged from %s to %s", steps, interval, from.Format("15:04:05"), to.Format("15:04:05"))
	if steps < 30 {
		t.Errorf("only %d evaluations judged", steps)
	}

	// The pods running now are up, and every pod of the release was discovered and scraped.
	waitPodsUp(t, stack, pods, time.Minute)
	window := promDuration(time.Since(from).Round(time.Second) + time.Second)
	up, err := stack.Query(ctx, `max by (pod) (max_over_time(up{job="`+promstack.JobName+`"}[`+window+`]))`)
	if err != nil {
		t.Fatal(err)
	}
	scraped := map[string]bool{}
	for _, s := range up {
		scraped[s.Labels["pod"]] = s.Value == 1
	}
	for p := range seen {
		if !scraped[p] {
			t.Errorf("pod %s was never discovered and scraped up (up by pod: %v)", p, up)
		}
	}

	// No alert of the mixin fired, at any evaluation; only those of nodePendingAllowed were
	// pending.
	for _, state := range []string{"firing", "pending"} {
		alerts, err := stack.Query(ctx, `max by (alertname, provider, target) (max_over_time(ALERTS{alertstate="`+state+`"}[`+window+`]))`)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range alerts {
			name := a.Labels["alertname"]
			switch why, ok := nodePendingAllowed[name]; {
			case state == "firing":
				t.Errorf("alert %s fired: %v", name, a)
			case ok:
				t.Logf("alert %s was pending, as it may be: %s", name, why)
			default:
				t.Errorf("alert %s was pending: %v", name, a)
			}
		}
	}
	if n := stack.Notifications(); len(n) > 0 {
		t.Errorf("Alertmanager notified %d times: %+v", len(n), n)
	}
	t.Logf("as Prometheus scraped the pods (up, the members each sees, the providers each serves):\n%s", nodeTimeline(ctx, stack, from, to, interval))
}

// waitPodsUp waits until the pods Prometheus scrapes up are pods (sorted), and only those.
func waitPodsUp(t *testing.T, stack *promstack.Stack, pods []string, timeout time.Duration) {
	t.Helper()
	stack.WaitForQuery(t, `up{job="`+promstack.JobName+`"} == 1`, func(s []promstack.Sample) bool {
		up := make([]string, 0, len(s))
		for _, x := range s {
			up = append(up, x.Labels["pod"])
		}
		slices.Sort(up)
		return slices.Equal(up, pods)
	}, timeout)
}

// promDuration is d in Prometheus's syntax (whole seconds).
func promDuration(d time.Duration) string { return fmt.Sprintf("%ds", int64(d/time.Second)) }

// nodeTimeline shows, at each step from from to to, each pod's providers, its up and the
// members it sees, as Prometheus scraped them.
func nodeTimeline(ctx context.Context, stack *promstack.Stack, from, to time.Time, step time.Duration) string {
	job := `{job="` + promstack.JobName + `"}`
	at := map[int64]map[string][]string{}
	add := func(ts time.Time, pod, s string) {
		if at[ts.UnixMilli()] == nil {
			at[ts.UnixMilli()] = map[string][]string{}
		}
		at[ts.UnixMilli()][pod] = append(at[ts.UnixMilli()][pod], s)
	}
	for _, q := range []struct{ query, label string }{
		{"up" + job, "up"},
		{"proxy_operator_shard_members" + job, "members"},
		{"max by (pod, provider) (proxy_operator_provider_target_up" + job + ")", "provider"},
	} {
		series, err := stack.QueryRange(ctx, q.query, from, to, step)
		if err != nil {
			return err.Error()
		}
		for _, se := range series {
			for _, pt := range se.Points {
				if q.label == "provider" {
					add(pt.T, se.Labels["pod"], se.Labels["provider"])
				} else {
					add(pt.T, se.Labels["pod"], fmt.Sprintf("%s=%g", q.label, pt.V))
				}
			}
		}
	}
	var b strings.Builder
	for ts := from.Truncate(time.Second); !ts.After(to); ts = ts.Add(step) {
		fmt.Fprintf(&b, "%s", ts.Format("15:04:05"))
		pods := at[ts.UnixMilli()]
		names := make([]string, 0, len(pods))
		for p := range pods {
			names = append(names, p)
		}
		slices.Sort(names)
		for _, p := range names {
			fmt.Fprintf(&b, " | %s: %s", p, strings.Join(pods[p], " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// podLogs follows the logs of the release's pods (kubectl logs -f --timestamps) into files of
// the test's artifact directory, so that a pod's log outlives the pod.
type podLogs struct {
	ctx        context.Context
	cancel     context.CancelFunc
	kubeconfig string
	dir        string
	mu         sync.Mutex
	followed   map[string]bool
	wg         sync.WaitGroup
}

func followPodLogs(ctx context.Context, t *testing.T, kubeconfig string) *podLogs {
	ctx, cancel := context.WithCancel(ctx)
	l := &podLogs{ctx: ctx, cancel: cancel, kubeconfig: kubeconfig, dir: t.ArtifactDir(), followed: map[string]bool{}}
	t.Cleanup(l.stop)
	return l
}

// follow starts following each pod not followed yet.
func (l *podLogs) follow(pods []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pods {
		if l.followed[p] {
			continue
		}
		f, err := os.Create(filepath.Join(l.dir, "pod-"+p+".log"))
		if err != nil {
			continue
		}
		l.followed[p] = true
		cmd := exec.CommandContext(l.ctx, "kubectl", "logs", "-f", "--timestamps", "-n", "phe", p)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+l.kubeconfig)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			f.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			_ = cmd.Wait()
			f.Close()
		}()
	}
}

// between returns the lines the followed pods logged from from to to, each with its pod.
func (l *podLogs) between(from, to time.Time) string {
	l.mu.Lock()
	pods := make([]string, 0, len(l.followed))
	for p := range l.followed {
		pods = append(pods, p)
	}
	l.mu.Unlock()
	slices.Sort(pods)
	var b strings.Builder
	for _, p := range pods {
		data, err := os.ReadFile(filepath.Join(l.dir, "pod-"+p+".log"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			stamp, _, _ := strings.Cut(line, " ")
			ts, err := time.Parse(time.RFC3339Nano, stamp)
			if err == nil && !ts.Before(from) && !ts.After(to) {
				fmt.Fprintf(&b, "%s: %s\n", p, line)
			}
		}
	}
	return b.String()
}

// stop ends the followers and waits for them.
func (l *podLogs) stop() {
	l.cancel()
	l.wg.Wait()
}
