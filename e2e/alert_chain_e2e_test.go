package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/chain"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/kvmhost"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/promstack"
)

// The alert chain, judged end to end: real KVM hosts, the exporter, a real Prometheus
// evaluating the mixin's rules, a real Alertmanager with the mixin's inhibit rules and the
// route docs/mixin.md recommends, and the webhook receiver counting notifications. Every
// duration of the mixin's _config (for: windows, rule intervals, the route's group_wait,
// group_interval and repeat_interval) and of Prometheus (scrape and evaluation interval,
// resend delay: 1m by default) is divided by chainScale, so the chain behaves as in production,
// only faster. The exporter checks every 10s, its shortest interval (1m would scale to 6s).

// chainScale divides every duration of the chain.
const chainScale = 10

// chainDefaultInterval is Prometheus's default scrape and evaluation interval and resend
// delay (1m), scaled.
const chainDefaultInterval = chain.PrometheusDefault / chainScale

const (
	alertTargetDown   = "ProviderHealthTargetDown"
	alertProviderDown = "ProviderHealthProviderDown"
)

// kvmProviders writes a providers file with one kvm provider per entry of hosts (provider
// name: the fleet's hosts it checks).
func kvmProviders(t *testing.T, fleet *kvmhost.Fleet, hosts map[string][]int) string {
	t.Helper()
	kvm := fleet.KVMConfig()
	var b strings.Builder
	b.WriteString("providers:\n")
	names := make([]string, 0, len(hosts))
	for name := range hosts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, `  - name: %s
    type: kvm
    kvm:
      user: %s
      privateKeyFile: %s
      knownHostsFile: %s
      socket: %s
      storagePool: %s
      hosts:
`, name, kvm.User, kvm.PrivateKeyFile, kvm.KnownHostsFile, kvm.Socket, kvm.StoragePool)
		for _, i := range hosts[name] {
			fmt.Fprintf(&b, "        - {address: %q, name: %s}\n", kvm.Hosts[i].Address, kvm.Hosts[i].Name)
		}
	}
	path := filepath.Join(t.TempDir(), "providers.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// page is one alert of a notification, as the person on call reads it.
type page struct {
	status, alertname, cluster, provider, target string
}

func (p page) String() string {
	s := p.status + " " + strings.TrimPrefix(p.alertname, "ProviderHealth") + " " + p.provider
	if p.target != "" {
		s += "/" + p.target
	}
	if p.cluster != "" {
		s = "[" + p.cluster + "] " + s
	}
	return s
}

// pages lists the alerts of a notification.
func pages(n promstack.Notification) []page {
	var out []page
	for _, a := range n.Alerts {
		out = append(out, page{a.Status, a.Labels["alertname"], a.Labels["cluster"], a.Labels["provider"], a.Labels["target"]})
	}
	return out
}

// firing lists the targets (or "" for an alert without one) of the firing alerts named
// alertname in n, in cluster ("" for any).
func firing(n promstack.Notification, alertname, cluster string) []string {
	var out []string
	for _, p := range pages(n) {
		if p.status == "firing" && p.alertname == alertname && (cluster == "" || p.cluster == cluster) {
			out = append(out, p.target)
		}
	}
	slices.Sort(out)
	return out
}

// describe renders notifications for a failure message, one per line.
func describe(ns []promstack.Notification) string {
	var b strings.Builder
	for i, n := range ns {
		fmt.Fprintf(&b, "\n  #%d group %v: %v", i, n.GroupLabels, pages(n))
	}
	if b.Len() == 0 {
		return " (none)"
	}
	return b.String()
}

// waitAll polls cond until it holds or timeout passes, and reports whether it held.
func waitAll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}

// logPlacement logs where Prometheus placed the chain's scrape and rule groups within the
// interval (seconds after the interval's start), so that a failure names the placement.
func logPlacement(t *testing.T, name string, s *promstack.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offset := func(ts time.Time) string {
		return fmt.Sprintf("%.2fs", float64(ts.UnixMilli()%chainDefaultInterval.Milliseconds())/1000)
	}
	var parts []string
	if targets, err := s.Targets(ctx); err == nil {
		for _, tg := range targets {
			parts = append(parts, "scrape "+offset(tg.LastScrape))
		}
	}
	groups, err := s.RuleGroups(ctx)
	if err != nil {
		t.Logf("%s: rule groups: %v", name, err)
		return
	}
	for _, g := range groups {
		if g.Interval == chainDefaultInterval.Seconds() {
			parts = append(parts, g.Name+" "+offset(g.LastEvaluation))
		}
	}
	t.Logf("%s: placement within the %v interval: %s", name, chainDefaultInterval, strings.Join(parts, ", "))
}

// TestAlertChainOnePagePerOutage: for several placements of the mixin's rule groups (the same
// rules loaded by four Prometheus servers from four different paths, each with its own
// Alertmanager, all evaluating one exporter checking 4 real KVM hosts of one provider):
//   - one host of 4 down: one TargetDown notification, no ProviderDown;
//   - all 4 hosts down together (their libvirtd stopped one after the other, as fast as the
//     test can, so that they may straddle a round of checks): exactly one ProviderDown
//     notification and no TargetDown notification, also after the TargetDown alerts of the
//     outage fire in Prometheus (targetDownFor after the outage began, and targetDownFor more),
//     when the inhibit rule mutes them;
//   - 2 hosts back (a partial recovery): the 2 targets still down notify as one notification
//     of the provider's TargetDown group, not one page each.
func TestAlertChainOnePagePerOutage(t *testing.T) {
	t.Parallel()
	const provider = "hypervisors"
	const placements = 4
	mixin := chain.Render(t, chainScale)
	fleet := kvmhost.Start(t, 4)
	hosts := fleet.Hosts
	providers := kvmProviders(t, fleet, map[string][]int{provider: {0, 1, 2, 3}})
	x := startExporter(t, "--config.file="+providers, "--provider-check-interval=10s")
	scrape := []string{strings.TrimPrefix(x.base, "http://")}

	dir := t.TempDir()
	stacks := make([]*promstack.Stack, placements)
	for k := range stacks {
		stacks[k] = promstack.Start(t, mixin.StackOptions(scrape, mixin.WriteRuleFiles(t, dir, k)))
	}
	up := func(n float64) func([]promstack.Sample) bool {
		return func(s []promstack.Sample) bool { return len(s) == 1 && s[0].Value == n }
	}
	for _, s := range stacks {
		s.WaitForQuery(t, `count(proxy_operator_provider_target_up == 1)`, up(4), 90*time.Second)
	}
	for k, s := range stacks {
		logPlacement(t, fmt.Sprintf("placement %d", k), s)
	}

	// notifiedSince returns the notifications of stack k from index from on.
	notifiedSince := func(k, from int) []promstack.Notification { return stacks[k].Notifications()[from:] }
	marks := func() []int {
		m := make([]int, len(stacks))
		for k, s := range stacks {
			m[k] = len(s.Notifications())
		}
		return m
	}
	// The longest a page may take after its alert's condition holds: a round of checks, a
	// scrape, an evaluation, for:, group_wait, with room for a loaded machine.
	pageWithin := 10*time.Second + 2*chainDefaultInterval + mixin.TargetDownFor + mixin.GroupWait + 30*time.Second

	// One host of 4 down: one TargetDown notification, no ProviderDown.
	from := marks()
	hosts[0].StopLibvirtd()
	for k := range stacks {
		if !waitAll(pageWithin, func() bool {
			for _, n := range notifiedSince(k, from[k]) {
				if slices.Equal(firing(n, alertTargetDown, ""), []string{hosts[0].Name}) {
					return true
				}
			}
			return false
		}) {
			t.Fatalf("placement %d, one host of 4 down: no TargetDown notification for %s within %v; notifications:%s", k, hosts[0].Name, pageWithin, describe(notifiedSince(k, from[k])))
		}
	}
	hosts[0].StartLibvirtd()
	for _, s := range stacks {
		s.WaitForQuery(t, `count(proxy_operator_provider_target_up == 1)`, up(4), 60*time.Second)
	}
	for k := range stacks {
		var targetDown, providerDown int
		for _, n := range notifiedSince(k, from[k]) {
			if len(firing(n, alertTargetDown, "")) > 0 {
				targetDown++
			}
			if len(firing(n, alertProviderDown, "")) > 0 {
				providerDown++
			}
		}
		if targetDown != 1 || providerDown != 0 {
			t.Errorf("placement %d, one host of 4 down: %d firing TargetDown and %d firing ProviderDown notifications, want 1 and 0:%s", k, targetDown, providerDown, describe(notifiedSince(k, from[k])))
		}
	}

	// All 4 hosts down together: one ProviderDown notification, no TargetDown. The test waits
	// until each Prometheus fires the 4 TargetDown alerts of the outage (they come back when
	// their targets have been down for targetDownFor, and fire targetDownFor later) and
	// Alertmanager has held them through group_wait and a group_interval: muted, inhibited by
	// the ProviderDown.
	from = marks()
	outage := time.Now()
	for _, h := range hosts {
		h.StopLibvirtd()
	}
	for k := range stacks {
		if !waitAll(pageWithin, func() bool {
			for _, n := range notifiedSince(k, from[k]) {
				if len(firing(n, alertProviderDown, "")) > 0 {
					return true
				}
			}
			return false
		}) {
			t.Errorf("placement %d, all 4 hosts down: no ProviderDown notification within %v; notifications:%s", k, pageWithin, describe(notifiedSince(k, from[k])))
		}
	}
	allTargetDownFiring := func(s *promstack.Stack) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := s.Query(ctx, `count(ALERTS{alertname="`+alertTargetDown+`", alertstate="firing"})`)
		return err == nil && len(r) == 1 && r[0].Value == 4
	}
	for k, s := range stacks {
		if !waitAll(pageWithin+mixin.TargetDownFor, func() bool { return allTargetDownFiring(s) }) {
			t.Errorf("placement %d: the 4 TargetDown alerts of the outage do not fire in Prometheus (the inhibit rule has nothing to mute; the test would prove nothing)", k)
		}
	}
	time.Sleep(mixin.GroupWait + mixin.GroupInterval + chainDefaultInterval)
	for k, s := range stacks {
		var providerDown int
		var targetDown []string
		for _, n := range notifiedSince(k, from[k]) {
			if len(firing(n, alertProviderDown, "")) > 0 {
				providerDown++
			}
			targetDown = append(targetDown, firing(n, alertTargetDown, "")...)
		}
		if len(targetDown) > 0 {
			t.Errorf("placement %d, all 4 hosts down: TargetDown notified for %v (within %v of the outage's start); a whole provider's outage must page ProviderDown only; notifications:%s", k, targetDown, time.Since(outage).Round(time.Second), describe(notifiedSince(k, from[k])))
		}
		if providerDown != 1 {
			t.Errorf("placement %d, all 4 hosts down: %d ProviderDown notifications, want 1:%s", k, providerDown, describe(notifiedSince(k, from[k])))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		held, err := s.Alerts(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		inhibited := 0
		for _, a := range held {
			if a.Name() == alertTargetDown && a.Status.State == "suppressed" && len(a.Status.InhibitedBy) > 0 {
				inhibited++
			}
		}
		if inhibited != 4 {
			t.Errorf("placement %d: Alertmanager holds %d TargetDown alerts inhibited, want the 4 of the outage", k, inhibited)
		}
	}

	// A partial recovery: 2 hosts back. ProviderDown resolves (after its keep_firing_for); the
	// 2 targets still down notify as one notification of the provider's TargetDown group.
	from = marks()
	hosts[0].StartLibvirtd()
	hosts[1].StartLibvirtd()
	stillDown := []string{hosts[2].Name, hosts[3].Name}
	slices.Sort(stillDown)
	for k := range stacks {
		ok := waitAll(mixin.Duration(t, "providerDownKeepFiringFor")+mixin.GroupInterval+2*chainDefaultInterval+10*time.Second+30*time.Second, func() bool {
			for _, n := range notifiedSince(k, from[k]) {
				if len(firing(n, alertTargetDown, "")) > 0 {
					return true
				}
			}
			return false
		})
		ns := notifiedSince(k, from[k])
		if !ok {
			t.Errorf("placement %d, partial recovery: no TargetDown notification for the targets still down; notifications:%s", k, describe(ns))
			continue
		}
		first := true
		for _, n := range ns {
			tds := firing(n, alertTargetDown, "")
			if len(tds) == 0 {
				continue
			}
			if n.GroupLabels["alertname"] != alertTargetDown || n.GroupLabels["provider"] != provider {
				t.Errorf("placement %d, partial recovery: a TargetDown notification grouped by %v, want the recommended route's group (alertname, cluster, provider)", k, n.GroupLabels)
			}
			// The first one holds both targets still down (a target that came back a round
			// later than the other may be in it too, and resolve in the next).
			if first && (!slices.Contains(tds, stillDown[0]) || !slices.Contains(tds, stillDown[1])) {
				t.Errorf("placement %d, partial recovery: the first TargetDown notification holds %v, want both targets still down %v in one notification; notifications:%s", k, tds, stillDown, describe(ns))
			}
			first = false
		}
		for _, n := range ns {
			if len(firing(n, alertProviderDown, "")) > 0 {
				t.Errorf("placement %d, partial recovery: ProviderDown notified firing again:%s", k, describe(ns))
				break
			}
		}
	}
	for k, s := range stacks {
		logPlacement(t, fmt.Sprintf("placement %d", k), s)
		t.Logf("placement %d: every notification:%s", k, describe(s.Notifications()))
	}
}

// TestAlertChainClusters: two clusters, each with its Prometheus (external label cluster a,
// cluster b) and its exporter, one Alertmanager with the mixin's inhibit rules and
// recommended route. Each cluster has a provider named hypervisors: one host in a, two in b.
// a's provider goes down as a whole (one page: its ProviderDown; its one target's TargetDown,
// which fires later, is muted); then a host of b's provider goes down: its TargetDown is
// notified, not muted by a's ProviderDown of the same provider name.
func TestAlertChainClusters(t *testing.T) {
	t.Parallel()
	const provider = "hypervisors"
	mixin := chain.Render(t, chainScale)
	fleet := kvmhost.Start(t, 3)
	hosts := fleet.Hosts
	xa := startExporter(t, "--config.file="+kvmProviders(t, fleet, map[string][]int{provider: {0}}), "--provider-check-interval=10s")
	xb := startExporter(t, "--config.file="+kvmProviders(t, fleet, map[string][]int{provider: {1, 2}}), "--provider-check-interval=10s")
	dir := t.TempDir()
	optsA := mixin.StackOptions([]string{strings.TrimPrefix(xa.base, "http://")}, mixin.WriteRuleFiles(t, dir, 0))
	optsA.ExternalLabels = map[string]string{"cluster": "a"}
	a := promstack.Start(t, optsA)
	optsB := mixin.StackOptions([]string{strings.TrimPrefix(xb.base, "http://")}, mixin.WriteRuleFiles(t, dir, 1))
	optsB.ExternalLabels = map[string]string{"cluster": "b"}
	optsB.Alertmanager = a
	b := promstack.Start(t, optsB)
	a.WaitForQuery(t, `count(proxy_operator_provider_target_up == 1)`, func(s []promstack.Sample) bool { return len(s) == 1 && s[0].Value == 1 }, 90*time.Second)
	b.WaitForQuery(t, `count(proxy_operator_provider_target_up == 1)`, func(s []promstack.Sample) bool { return len(s) == 1 && s[0].Value == 2 }, 90*time.Second)
	pageWithin := 10*time.Second + 2*chainDefaultInterval + mixin.TargetDownFor + mixin.GroupWait + 30*time.Second

	has := func(alertname, cluster string, targets ...string) func() bool {
		return func() bool {
			for _, n := range a.Notifications() {
				if got := firing(n, alertname, cluster); len(got) > 0 && slices.Equal(got, targets) {
					return true
				}
			}
			return false
		}
	}
	hosts[0].StopLibvirtd()
	if !waitAll(pageWithin, has(alertProviderDown, "a", "")) {
		t.Fatalf("cluster a's provider down: no ProviderDown notification for cluster a within %v; notifications:%s", pageWithin, describe(a.Notifications()))
	}
	hosts[1].StopLibvirtd()
	if !waitAll(pageWithin, has(alertTargetDown, "b", hosts[1].Name)) {
		t.Errorf("a target of cluster b's provider %s down while cluster a's provider of that name is down: no TargetDown notification for cluster b within %v (muted by cluster a's ProviderDown?); notifications:%s", provider, pageWithin, describe(a.Notifications()))
	}
	// a's one target's TargetDown fires (targetDownFor after its outage began, and
	// targetDownFor later) and is muted by a's ProviderDown: a single-target provider pages once.
	if !waitAll(pageWithin+mixin.TargetDownFor, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := a.Query(ctx, `ALERTS{alertname="`+alertTargetDown+`", alertstate="firing"}`)
		return err == nil && len(r) == 1
	}) {
		t.Errorf("cluster a: the TargetDown of its one target does not fire in Prometheus (the inhibit rule has nothing to mute; the test would prove nothing)")
	}
	time.Sleep(mixin.GroupWait + mixin.GroupInterval + chainDefaultInterval)
	count := map[string]int{}
	for _, n := range a.Notifications() {
		for _, p := range pages(n) {
			// One host of b's two down burns b's error budget at 500 times its rate: its
			// ErrorBudget alerts are true pages, and not what this test is about. a's are
			// counted: a's ProviderDown mutes them.
			if p.status == "firing" && !(p.cluster == "b" && strings.HasPrefix(p.alertname, "ProviderHealthErrorBudget")) {
				count[p.String()]++
			}
		}
	}
	want := map[string]int{
		page{"firing", alertProviderDown, "a", provider, ""}.String():          1,
		page{"firing", alertTargetDown, "b", provider, hosts[1].Name}.String(): 1,
	}
	for k, n := range count {
		if n != want[k] {
			t.Errorf("%s notified %d times, want %d; notifications:%s", k, n, want[k], describe(a.Notifications()))
		}
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s notified %d times, want %d", k, count[k], n)
		}
	}

	// a's provider comes back as a whole: its TargetDown, firing and muted, must resolve in
	// Prometheus at least one evaluation before its ProviderDown (keep_firing_for), so that
	// Alertmanager never holds the ProviderDown resolved while the TargetDown it muted still
	// fires; and a's TargetDown is not notified firing on the way.
	mark := len(a.Notifications())
	hosts[0].StartLibvirtd()
	keep := mixin.Duration(t, "providerDownKeepFiringFor")
	firingNow := func(alertname string) int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := a.Query(ctx, `ALERTS{alertname="`+alertname+`", alertstate="firing"}`)
		if err != nil {
			return -1
		}
		return len(r)
	}
	if !waitAll(10*time.Second+2*chainDefaultInterval+keep+30*time.Second, func() bool { return firingNow(alertProviderDown) == 0 && firingNow(alertTargetDown) == 0 }) {
		t.Fatalf("cluster a's provider back: its ProviderDown and TargetDown still fire in Prometheus")
	}
	lastFiring := func(alertname string) time.Time {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := a.Query(ctx, `max_over_time(timestamp(ALERTS{alertname="`+alertname+`", alertstate="firing"})[5m:])`)
		if err != nil || len(r) != 1 {
			t.Fatalf("the last evaluation %s fired at: %v (%d samples)", alertname, err, len(r))
		}
		return time.UnixMilli(int64(r[0].Value * 1000))
	}
	td, pd := lastFiring(alertTargetDown), lastFiring(alertProviderDown)
	if pd.Sub(td) < chainDefaultInterval {
		t.Errorf("cluster a's provider back: its TargetDown fired last at %s and its ProviderDown at %s: want ProviderDown to fire at least one evaluation (%v) longer", td.Format(time.StampMilli), pd.Format(time.StampMilli), chainDefaultInterval)
	}
	time.Sleep(mixin.GroupWait + mixin.GroupInterval + chainDefaultInterval)
	for _, n := range a.Notifications()[mark:] {
		if got := firing(n, alertTargetDown, "a"); len(got) > 0 {
			t.Errorf("cluster a's provider back: TargetDown notified firing for %v; notifications since the recovery:%s", got, describe(a.Notifications()[mark:]))
		}
	}
	logPlacement(t, "cluster a", a)
	logPlacement(t, "cluster b", b)
}
