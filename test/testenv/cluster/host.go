package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// What the cluster changes on the host outside its directory, so that Stop can undo it and
// Leftovers can say what is still there. Recorded by snapshotHost before anything starts.

// sysctls are the kernel settings the cluster's parts change: ip_forward (Services), and those
// the kubelet and kube-proxy set on their own.
var sysctls = []string{
	"net/ipv4/ip_forward",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// hostPaths are the places outside its own directory where the kubelet and containerd create
// files whatever they are told (/var/lib/kubelet/pki and device-plugins, the container log
// links, the shims' sockets, CNI's network namespaces).
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/log/pods",
	"/var/log/containers",
	"/run/containerd",
	"/var/lib/cni",
	"/run/netns",
	"/var/run/kubernetes",
}

// chainPrefixes name the iptables chains of kube-proxy, the kubelet and the CNI plugins.
var chainPrefixes = []string{"KUBE-", "CNI-"}

var iptablesTables = []string{"filter", "nat", "mangle", "raw"}

type hostState struct {
	sysctls    map[string]string // path under /proc/sys: value
	paths      map[string]bool   // hostPaths that existed
	netns      map[string]bool   // names in /run/netns
	interfaces map[string]bool
	chains     map[string]bool // "iptables/nat/KUBE-SERVICES"
}

func snapshotHost() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, paths: map[string]bool{}, netns: map[string]bool{}, interfaces: map[string]bool{}}
	for _, s := range sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
			h.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			h.paths[p] = true
		}
	}
	for _, n := range netnsNames() {
		h.netns[n] = true
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifs {
		h.interfaces[i.Name] = true
	}
	h.chains = map[string]bool{}
	for _, c := range ourChains() {
		h.chains[c] = true
	}
	return h, nil
}

func netnsNames() []string {
	entries, _ := os.ReadDir("/run/netns")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// ourChains lists the chains named like kube-proxy's, the kubelet's and CNI's, as
// "command/table/chain".
func ourChains() []string {
	var out []string
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range iptablesTables {
			for _, line := range iptablesSave(cmd, table) {
				if name, ok := strings.CutPrefix(line, ":"); ok {
					name, _, _ = strings.Cut(name, " ")
					if hasChainPrefix(name) {
						out = append(out, cmd+"/"+table+"/"+name)
					}
				}
			}
		}
	}
	return out
}

func hasChainPrefix(name string) bool {
	return slices.ContainsFunc(chainPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

func iptablesSave(cmd, table string) []string {
	out, err := exec.Command(cmd+"-save", "-t", table).Output()
	if err != nil {
		return nil
	}
	return strings.Split(string(out), "\n")
}

// removeChains deletes the rules that jump to, or live in, the chains named like ours that were
// not there before, then the chains themselves.
func (h *hostState) removeChains() []error {
	var errs []error
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range iptablesTables {
			lines := iptablesSave(cmd, table)
			ours := map[string]bool{}
			for _, line := range lines {
				if name, ok := strings.CutPrefix(line, ":"); ok {
					name, _, _ = strings.Cut(name, " ")
					if hasChainPrefix(name) && !h.chains[cmd+"/"+table+"/"+name] {
						ours[name] = true
					}
				}
			}
			if len(ours) == 0 {
				continue
			}
			// Jumps from chains not ours (INPUT, POSTROUTING, ...) into ours.
			for _, line := range lines {
				rule, ok := strings.CutPrefix(line, "-A ")
				if !ok {
					continue
				}
				chain, _, _ := strings.Cut(rule, " ")
				_, target, _ := strings.Cut(rule, " -j ")
				target, _, _ = strings.Cut(target, " ")
				if ours[chain] || !ours[target] {
					continue
				}
				args := append([]string{"-w", "-t", table, "-D"}, splitRule(rule)...)
				if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s %s: %v: %s", cmd, strings.Join(args, " "), err, bytes.TrimSpace(out)))
				}
			}
			for name := range ours {
				_ = exec.Command(cmd, "-w", "-t", table, "-F", name).Run()
			}
			for name := range ours {
				if out, err := exec.Command(cmd, "-w", "-t", table, "-X", name).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s -X %s: %v: %s", cmd, table, name, err, bytes.TrimSpace(out)))
				}
			}
		}
	}
	return errs
}

// splitRule splits an iptables-save rule into arguments, keeping quoted comments whole (with
// their escaped quotes: CNI's name the container).
func splitRule(rule string) []string {
	var args []string
	var cur strings.Builder
	quoted, escaped := false, false
	for _, r := range rule {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

func setSysctl(name, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", name), []byte(value+"\n"), 0o644)
}

func (h *hostState) restoreSysctls() []error {
	var errs []error
	for name, before := range h.sysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil || strings.TrimSpace(string(b)) == before {
			continue
		}
		if err := setSysctl(name, before); err != nil {
			errs = append(errs, fmt.Errorf("restore %s=%s: %w", name, before, err))
		}
	}
	return errs
}

// mountsUnder lists the mount points at or under any of the prefixes, deepest first.
func mountsUnder(prefixes ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, p := range prefixes {
			if mp == p || strings.HasPrefix(mp, strings.TrimSuffix(p, "/")+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return slices.Compact(out)
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountAll(prefixes ...string) []error {
	var errs []error
	// A mount may hide another at the same place: go round until none is left.
	for range 5 {
		mps := mountsUnder(prefixes...)
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
			}
		}
	}
	return errs
}

// processesMentioning returns the processes whose command line contains s, with all their
// descendants (a shim's containers).
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var roots []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			// pid (comm) state ppid ...: comm may hold spaces and parentheses.
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(cmdline, []byte(s)) {
			roots = append(roots, pid)
		}
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if !in[pid] && in[pp] {
				in[pid], changed = true, true
			}
		}
	}
	var out []int
	for pid := range in {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}
