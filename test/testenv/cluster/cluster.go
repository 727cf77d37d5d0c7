// Package cluster runs a one-node Kubernetes on this machine from real parts: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy (built from
// the Kubernetes release the tests use, test/testenv/kube), Debian's containerd with runc,
// and the CNI bridge plugin. It serves make cluster (cmd/phe-cluster) and the Helm chart's e2e
// test. It needs root on Linux; Close leaves nothing behind on the host: no process, mount,
// network interface or iptables chain of its own, no file outside its directory, and the
// kernel settings it (or the kubelet, or kube-proxy) changed restored.
//
// It is one node at a time per machine (a lock held for the cluster's life): the kubelet's and
// kube-proxy's ports and the CNI bridge are the host's.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kube"
)

// Options says where the cluster lives and what it loads.
type Options struct {
	// Dir holds every file of the cluster (absolute; created). Its kubeconfig is
	// Dir/kubeconfig.
	Dir string
	// Root is the repository's root (the pause command is built from it).
	Root string
	// ImageLayout is an OCI image layout directory (make image's .build/image) to import;
	// empty: none. Its tagged images are named ImageName:tag.
	ImageLayout, ImageName string
	// Logf hears of progress.
	Logf func(format string, args ...any)
}

// Cluster is a running one-node cluster.
type Cluster struct {
	Dir string
	// Kubeconfig is the admin's kubeconfig (group system:masters).
	Kubeconfig string
	// Config is the admin's client configuration.
	Config *rest.Config
	// NodeIP is the node's address (the host's), where the API server listens.
	NodeIP string

	opts    Options
	host    *hostState
	lock    net.Listener
	daemons map[string]*testenv.Daemon
	order   []string // daemons in the order they started
	client  *kubernetes.Clientset
}

// Requirements reports why a cluster cannot run on this machine (empty: it can), for a test to
// skip: root on Linux, containerd, runc, ctr, iptables and the CNI plugins.
func Requirements() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet, containerd and CNI change the host's network and mounts)")
	}
	for _, c := range []string{"containerd", "runc", "ctr", "iptables", "iptables-save", "ip6tables", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c+" (Debian: containerd, runc, iptables, iproute2)")
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			missing = append(missing, "/usr/lib/cni/"+p+" (Debian: containernetworking-plugins)")
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		missing = append(missing, "/sys/fs/cgroup")
	}
	return missing
}

// ErrBusy: another cluster runs on this machine.
var ErrBusy = errors.New("another one-node cluster (make cluster, or the chart's e2e test) runs on this machine")

// Start builds what is missing (the Kubernetes binaries, the pause command), starts every part
// and waits until the node is Ready, the default ServiceAccount exists and Services work. On
// an error it undoes what it did.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if missing := Requirements(); len(missing) > 0 {
		return nil, fmt.Errorf("cannot run a cluster here: missing %s", strings.Join(missing, ", "))
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	// An abstract socket: held for the process's life, gone with it, no file.
	lock, err := net.Listen("unix", "@provider-health-exporter-cluster")
	if err != nil {
		return nil, ErrBusy
	}
	apiserver, etcd, err := kube.EnsureBinaries(ctx, o.Logf)
	if err != nil {
		lock.Close()
		return nil, err
	}
	nb, err := kube.EnsureNodeBinaries(ctx, o.Logf)
	if err != nil {
		lock.Close()
		return nil, err
	}
	host, err := snapshotHost()
	if err != nil {
		lock.Close()
		return nil, err
	}
	c = &Cluster{Dir: o.Dir, opts: o, host: host, lock: lock, daemons: map[string]*testenv.Daemon{}, Kubeconfig: filepath.Join(o.Dir, "kubeconfig")}
	defer func() {
		if err != nil {
			if cerr := c.Close(); cerr != nil {
				err = fmt.Errorf("%w (and undoing the start: %v)", err, cerr)
			}
			c = nil
		}
	}()
	// What an earlier run killed outright left mounted must not be walked into.
	if errs := unmountAll(o.Dir); len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		return c, err
	}
	for _, d := range []string{"pki", "logs", "manifests", "pod-logs", "cni/net.d", "cni/ipam", "containerd", "kubelet", "etcd"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return c, err
		}
	}
	if c.NodeIP, err = nodeIP(); err != nil {
		return c, err
	}
	if err := c.writeFiles(); err != nil {
		return c, err
	}
	if err := setSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return c, fmt.Errorf("turn on net.ipv4.ip_forward (Services): %w", err)
	}
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"etcd", func(ctx context.Context) error { return c.startEtcd(ctx, etcd) }},
		{"kube-apiserver", func(ctx context.Context) error { return c.startAPIServer(ctx, apiserver) }},
		{"containerd", c.startContainerd},
		{"images", c.loadImages},
		{"kube-controller-manager and kube-scheduler", func(ctx context.Context) error { return c.startControlPlane(nb) }},
		{"kubelet", func(ctx context.Context) error { return c.startKubelet(ctx, nb.Kubelet) }},
		{"kube-proxy", func(ctx context.Context) error { return c.startProxy(ctx, nb.Proxy) }},
		{"the default ServiceAccount", c.waitDefaultServiceAccount},
	}
	for _, s := range steps {
		began := time.Now()
		if err := s.fn(ctx); err != nil {
			return c, fmt.Errorf("%s: %w", s.what, err)
		}
		o.Logf("cluster: %s ready in %s", s.what, time.Since(began).Round(100*time.Millisecond))
	}
	return c, nil
}

// nodeIP is the IPv4 address of the interface the default route leaves by, else of the first
// interface that is up and not loopback.
func nodeIP() (string, error) {
	var names []string
	if b, err := os.ReadFile("/proc/net/route"); err == nil {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 2 && f[1] == "00000000" {
				names = append(names, f[0])
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagLoopback == 0 && i.Name != bridgeName {
			names = append(names, i.Name)
		}
	}
	for _, n := range names {
		i, err := net.InterfaceByName(n)
		if err != nil {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("no network interface with an IPv4 address besides loopback: the API server needs one that pods reach")
}

type identity struct{ user, group, token string }

// writeFiles writes the certificates, tokens, kubeconfigs and configuration files.
func (c *Cluster) writeFiles() error {
	d := c.Dir
	p, err := newPKI()
	if err != nil {
		return err
	}
	pkiDir := filepath.Join(d, "pki")
	if err := os.WriteFile(filepath.Join(pkiDir, "ca.crt"), p.caPEM(), 0o644); err != nil {
		return err
	}
	ip := net.ParseIP(c.NodeIP)
	if err := p.issue(pkiDir, "apiserver", "kube-apiserver", nil,
		[]net.IP{ip, net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}); err != nil {
		return err
	}
	if err := p.issue(pkiDir, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil); err != nil {
		return err
	}
	if err := writeServiceAccountKey(filepath.Join(pkiDir, "sa.key")); err != nil {
		return err
	}
	// Each part authenticates with a token of its own: the names the API server's default
	// RBAC bindings and Node authorizer know.
	ids := map[string]identity{
		"admin":                   {"admin", "system:masters", newToken()},
		"kubelet":                 {"system:node:" + NodeName, "system:nodes", newToken()},
		"kube-controller-manager": {"system:kube-controller-manager", "", newToken()},
		"kube-scheduler":          {"system:kube-scheduler", "", newToken()},
		"kube-proxy":              {"system:kube-proxy", "", newToken()},
	}
	var tokens strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&tokens, "%s,%s,%s,%q\n", id.token, id.user, id.user, id.group)
	}
	if err := os.WriteFile(filepath.Join(pkiDir, "tokens.csv"), []byte(tokens.String()), 0o600); err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(c.NodeIP, strconv.Itoa(c.apiPort()))
	for name, id := range ids {
		path := filepath.Join(d, name+".kubeconfig")
		if name == "admin" {
			path = c.Kubeconfig
		}
		cfg := clientcmdapi.Config{
			Clusters:       map[string]*clientcmdapi.Cluster{"phe-cluster": {Server: server, CertificateAuthorityData: p.caPEM()}},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{id.user: {Token: id.token}},
			Contexts:       map[string]*clientcmdapi.Context{"phe-cluster": {Cluster: "phe-cluster", AuthInfo: id.user}},
			CurrentContext: "phe-cluster",
		}
		if err := clientcmd.WriteToFile(cfg, path); err != nil {
			return err
		}
	}
	c.Config = &rest.Config{Host: server, BearerToken: ids["admin"].token, TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM()}, QPS: 100, Burst: 200}
	if c.client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	files := map[string]string{
		"containerd/config.toml":    containerdConfig(d),
		"cni/net.d/10-phe.conflist": cniConfig(d),
		"kubelet.yaml":              kubeletConfig(d, c.NodeIP),
		"kube-proxy.yaml":           kubeProxyConfig(d),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// apiPort is the API server's port: 6443 unless taken.
func (c *Cluster) apiPort() int {
	return 6443
}

func (c *Cluster) start(name, path string, args ...string) (*testenv.Daemon, error) {
	d, err := testenv.StartDaemon(name, path, args, filepath.Join(c.Dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	c.daemons[name] = d
	c.order = append(c.order, name)
	return d, nil
}

// waitFor polls ready until it says yes, the daemon exits, or timeout passes.
func waitFor(ctx context.Context, d *testenv.Daemon, timeout time.Duration, what string, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		if d != nil && d.Exited() {
			return fmt.Errorf("%s exited (%v):\n%s", d.Name, d.WaitErr(), d.LogTail(30))
		}
		if time.Now().After(deadline) {
			tail := ""
			if d != nil {
				tail = ":\n" + d.LogTail(30)
			}
			return fmt.Errorf("%s not within %s%s", what, timeout, tail)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

func httpOK(url string) bool {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (c *Cluster) startEtcd(ctx context.Context, path string) error {
	d, err := c.start("etcd", path, "--name=phe-cluster", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=phe-cluster=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	return waitFor(ctx, d, time.Minute, "etcd healthy", func() bool { return httpOK("http://127.0.0.1:2379/health") })
}

func (c *Cluster) startAPIServer(ctx context.Context, path string) error {
	pki := filepath.Join(c.Dir, "pki")
	d, err := c.start("kube-apiserver", path,
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address="+c.NodeIP,
		"--advertise-address="+c.NodeIP,
		"--secure-port="+strconv.Itoa(c.apiPort()),
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--client-ca-file="+filepath.Join(pki, "ca.crt"),
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"),
		"--token-auth-file="+filepath.Join(pki, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=false",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pki, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--kubelet-client-certificate="+filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+filepath.Join(pki, "apiserver-kubelet-client.key"),
		// The node's name is in no DNS: reach the kubelet (logs, exec) at its address.
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	return waitFor(ctx, d, 2*time.Minute, "kube-apiserver ready", func() bool {
		return c.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error() == nil
	})
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	d, err := c.start("containerd", "containerd", "--config", filepath.Join(c.Dir, "containerd", "config.toml"))
	if err != nil {
		return err
	}
	return waitFor(ctx, d, time.Minute, "containerd answering", func() bool {
		return exec.Command("ctr", "--address", socketPath(c.Dir), "version").Run() == nil
	})
}

func (c *Cluster) loadImages(context.Context) error {
	pause := filepath.Join(c.Dir, "pause.tar")
	if err := buildPauseLayout(c.opts.Root, pause); err != nil {
		return err
	}
	name, tag, _ := strings.Cut(pauseImage, ":")
	if err := c.importImage(pause, name, name+":"+tag); err != nil {
		return err
	}
	if c.opts.ImageLayout == "" {
		return nil
	}
	archive := filepath.Join(c.Dir, "image.tar")
	if err := tarLayout(c.opts.ImageLayout, archive); err != nil {
		return err
	}
	defer os.Remove(archive)
	_, tag, _ = strings.Cut(c.opts.ImageName, ":")
	base := strings.TrimSuffix(c.opts.ImageName, ":"+tag)
	return c.importImage(archive, base, c.opts.ImageName)
}

func (c *Cluster) startControlPlane(nb kube.NodeBinaries) error {
	pki := filepath.Join(c.Dir, "pki")
	kc := func(n string) string { return filepath.Join(c.Dir, n+".kubeconfig") }
	if _, err := c.start("kube-controller-manager", nb.ControllerManager,
		"--kubeconfig="+kc("kube-controller-manager"),
		"--authentication-kubeconfig="+kc("kube-controller-manager"),
		"--authorization-kubeconfig="+kc("kube-controller-manager"),
		"--bind-address=127.0.0.1",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--root-ca-file="+filepath.Join(pki, "ca.crt"),
		"--cluster-cidr="+podCIDR,
		"--service-cluster-ip-range="+serviceCIDR,
		"--leader-elect=false",
		"--cert-dir="+filepath.Join(c.Dir, "controller-manager-certs"),
		"--profiling=false",
	); err != nil {
		return err
	}
	_, err := c.start("kube-scheduler", nb.Scheduler,
		"--kubeconfig="+kc("kube-scheduler"),
		"--authentication-kubeconfig="+kc("kube-scheduler"),
		"--authorization-kubeconfig="+kc("kube-scheduler"),
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--cert-dir="+filepath.Join(c.Dir, "scheduler-certs"),
		"--profiling=false",
	)
	return err
}

func (c *Cluster) startKubelet(ctx context.Context, path string) error {
	d, err := c.start("kubelet", path,
		"--config="+filepath.Join(c.Dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(c.Dir, "kubelet.kubeconfig"),
		"--root-dir="+filepath.Join(c.Dir, "kubelet"),
		"--cert-dir="+filepath.Join(c.Dir, "kubelet", "pki"),
		"--hostname-override="+NodeName,
		"--node-ip="+c.NodeIP,
	)
	if err != nil {
		return err
	}
	return waitFor(ctx, d, 3*time.Minute, "node "+NodeName+" Ready", func() bool {
		n, err := c.client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

func (c *Cluster) startProxy(ctx context.Context, path string) error {
	d, err := c.start("kube-proxy", path, "--config="+filepath.Join(c.Dir, "kube-proxy.yaml"))
	if err != nil {
		return err
	}
	return waitFor(ctx, d, 2*time.Minute, "kube-proxy healthy", func() bool { return httpOK("http://127.0.0.1:10256/healthz") })
}

func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	return waitFor(ctx, c.daemons["kube-controller-manager"], 2*time.Minute, "the default ServiceAccount and kube-root-ca.crt", func() bool {
		_, err1 := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		_, err2 := c.client.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err1 == nil && err2 == nil
	})
}

// Close stops the cluster and removes what it left on the host; its error lists what it could
// not undo (Leftovers says what is still there).
func (c *Cluster) Close() error {
	var errs []error
	stop := func(names ...string) {
		for _, n := range names {
			if d := c.daemons[n]; d != nil && !d.Exited() {
				d.Stop(syscall.SIGTERM, 10*time.Second)
			}
		}
	}
	// No controller recreates what goes now; the kubelet stops the pods (their sandboxes'
	// networks through CNI) while containerd still runs.
	stop("kube-controller-manager", "kube-scheduler")
	if c.daemons["kubelet"] != nil && !c.daemons["kubelet"].Exited() && c.client != nil {
		c.deletePods()
	}
	stop("kube-proxy", "kubelet", "containerd")
	// The shims and containers that outlived containerd.
	if c.daemons["containerd"] != nil {
		for _, pid := range processesMentioning(socketPath(c.Dir)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	stop("kube-apiserver", "etcd")
	for _, d := range c.daemons {
		if !d.Exited() {
			errs = append(errs, fmt.Errorf("%s (pid %d) does not stop", d.Name, d.PID()))
		}
	}
	if c.host != nil {
		errs = append(errs, c.cleanHost()...)
	}
	if c.lock != nil {
		c.lock.Close()
	}
	return errors.Join(errs...)
}

// deletePods deletes every pod at once and waits (at most a minute) until containerd runs no
// container any more.
func (c *Cluster) deletePods() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nss, err := c.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	zero := int64(0)
	for _, ns := range nss.Items {
		_ = c.client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	}
	_ = waitFor(ctx, nil, time.Minute, "no running container", func() bool {
		out, err := exec.Command("ctr", "--address", socketPath(c.Dir), "-n", "k8s.io", "tasks", "ls", "-q").Output()
		return err == nil && strings.TrimSpace(string(out)) == ""
	})
}

// cleanHost removes what the parts left outside their processes: mounts, network namespaces,
// the bridge, iptables chains, files outside Dir; and restores the kernel settings.
func (c *Cluster) cleanHost() []error {
	var errs []error
	var netns []string
	for _, n := range c.newNetns() {
		netns = append(netns, filepath.Join("/run/netns", n))
	}
	errs = append(errs, unmountAll(append([]string{c.Dir, "/run/containerd", "/var/lib/kubelet"}, netns...)...)...)
	for _, n := range netns {
		_ = os.Remove(n)
	}
	// The pods' veth ends went with their namespaces; the bridge stays until deleted.
	for _, i := range c.newInterfaces() {
		if out, err := exec.Command("ip", "link", "delete", i).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find") {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", i, err, out))
		}
	}
	errs = append(errs, c.host.removeChains()...)
	errs = append(errs, c.host.restoreSysctls()...)
	for _, p := range hostPaths {
		if c.host.paths[p] {
			continue
		}
		remove := os.RemoveAll
		if p == "/run/netns" {
			remove = os.Remove // other programs' namespaces may live there now
		}
		if err := remove(p); err != nil && !errors.Is(err, os.ErrNotExist) && p != "/run/netns" {
			errs = append(errs, err)
		}
	}
	return errs
}

// newNetns lists the network namespaces containerd made for pods (cni-<id>) since the start;
// other programs' namespaces are not the cluster's business.
func (c *Cluster) newNetns() []string {
	var out []string
	for _, n := range netnsNames() {
		if strings.HasPrefix(n, "cni-") && !c.host.netns[n] {
			out = append(out, n)
		}
	}
	return out
}

// newInterfaces lists the cluster's bridge and the interfaces attached to it.
func (c *Cluster) newInterfaces() []string {
	var out []string
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if c.host.interfaces[i.Name] {
			continue
		}
		master, _ := os.Readlink(filepath.Join("/sys/class/net", i.Name, "master"))
		if i.Name == bridgeName || filepath.Base(master) == bridgeName {
			out = append(out, i.Name)
		}
	}
	return out
}

// Leftovers lists what the cluster left on the host after Close: processes, mounts, network
// namespaces, interfaces, iptables chains, files outside Dir, changed kernel settings.
func (c *Cluster) Leftovers() []string {
	var out []string
	for _, d := range c.daemons {
		if !d.Exited() {
			out = append(out, "process "+d.Name)
		}
	}
	for _, pid := range processesMentioning(socketPath(c.Dir)) {
		out = append(out, "process "+strconv.Itoa(pid)+" of containerd")
	}
	for _, m := range mountsUnder(c.Dir, "/run/containerd", "/var/lib/kubelet") {
		out = append(out, "mount "+m)
	}
	for _, n := range c.newNetns() {
		out = append(out, "network namespace "+n)
	}
	for _, i := range c.newInterfaces() {
		out = append(out, "interface "+i)
	}
	for _, ch := range ourChains() {
		if !c.host.chains[ch] {
			out = append(out, "iptables chain "+ch)
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil && !c.host.paths[p] && p != "/run/netns" {
			out = append(out, "path "+p)
		}
	}
	for name, before := range c.host.sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", name)); err == nil && strings.TrimSpace(string(b)) != before {
			out = append(out, fmt.Sprintf("sysctl %s=%s (was %s)", name, strings.TrimSpace(string(b)), before))
		}
	}
	return out
}
