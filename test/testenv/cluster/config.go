package cluster

import (
	"fmt"
	"path/filepath"
)

// The cluster's fixed addresses: pods get addresses from podCIDR on the bridge bridgeName,
// Services from serviceCIDR (the kubernetes Service is its first address).
const (
	podCIDR     = "10.244.0.0/24"
	serviceCIDR = "10.96.0.0/16"
	bridgeName  = "phe-cni0"
	// NodeName is the name of the cluster's one node.
	NodeName = "phe-node"
	// pauseImage is the pod sandbox image's name, built here (no registry is reachable).
	pauseImage = "registry.k8s.io/pause:3.10"
)

func containerdConfig(dir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # root may not lower a process's oom_score_adj here (no CAP_SYS_RESOURCE in the bounding set):
  # the kubelet's -998 for sandboxes would fail every pod.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), socketPath(dir),
		socketPath(dir)+".ttrpc", filepath.Join(dir, "containerd", "opt"), pauseImage, filepath.Join(dir, "cni", "net.d"))
}

func socketPath(dir string) string { return filepath.Join(dir, "containerd", "containerd.sock") }

func cniConfig(dir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "phe-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, bridgeName, filepath.Join(dir, "cni", "ipam"), podCIDR)
}

func kubeletConfig(dir, nodeIP string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
staticPodPath: %[2]s
podLogsDir: %[3]s
containerRuntimeEndpoint: unix://%[4]s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[5]s
authorization:
  mode: Webhook
# Image garbage collection would delete the images the cluster imported (none can be pulled).
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
`, nodeIP, filepath.Join(dir, "manifests"), filepath.Join(dir, "pod-logs"), socketPath(dir), filepath.Join(dir, "pki", "ca.crt"))
}

func kubeProxyConfig(dir string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Zero: leave the host's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  # true would set net.ipv4.conf.all.route_localnet.
  localhostNodePorts: false
`, filepath.Join(dir, "kube-proxy.kubeconfig"), NodeName, podCIDR)
}
