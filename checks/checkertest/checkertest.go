// Package checkertest is the conformance kit of provider types: every provider type runs it
// from its own tests, against the real system (or wire server) its tests already start, and so
// proves the contract of checks.Checker that the exporter relies on and that no type-specific
// test states on its own.
//
// A type's test describes a healthy provider and a hung one, and calls Run:
//
//	func TestConformance(t *testing.T) {
//		srv := startMyServer(t) // the type's own test server
//		checkertest.Run(t, checkertest.Harness{
//			Type:    "mytype",
//			Block:   "url: " + srv.URL + "\npasswordFile: " + srv.PasswordFile,
//			Changed: "url: " + srv.URL + "\npasswordFile: " + srv.PasswordFile + "\ndatacenter: dc1",
//			Targets: []string{srv.Host},
//			Hung: func(addr string) string {
//				return "url: http://" + addr + "\npasswordFile: " + srv.PasswordFile
//			},
//			Secrets: func() []string { return []string{srv.Password} },
//		})
//	}
//
// A type without credentials leaves Secrets out; a type whose check is the connect itself runs
// against the SYN-dropped endpoint only (Hangs). The kit's own tests hold such a type, tcp
// (tcp_test.go): the smallest complete provider type, written as a model of one.
//
// Run loads each block the way the exporter does (config.Parse of a whole providers file, the
// block under the type's key of one provider), builds checkers with the registered constructor
// (checks.Lookup), and checks, each as a subtest:
//
//   - Load: the blocks decode; the same block loaded twice is Equal (a reload keeps the checker),
//     Changed is not (a reload rebuilds it); every file a block names is an absolute path that
//     exists (for the healthy block).
//   - Healthy: one Check reports exactly Harness.Targets, which is also Targets(), each once,
//     Ready and Up, with CheckedAt and a message; a checks.TargetProber probes every target
//     Ready with a trace of at least one stage and refuses an unknown target
//     (checks.ErrUnknownTarget); a checks.Staler is not stale; a checks.Retargeter hands over
//     to the checker of the same block, which stays healthy once the old one is closed.
//   - Deadline: against each kind of hung endpoint (Harness.Hangs), a Check of the hung
//     provider with a 300ms deadline returns by the deadline plus a grace of 5s (a correctness
//     bound, not a speed figure), every target down with a reason from the type's catalogue; so
//     does a probe of its first target (checks.TargetProber), whose trace is kept for the
//     NoSecret subtest.
//   - Abandoned: against each kind of hung endpoint, a Check of the hung provider with a
//     deadline of minutes is running when the checker is closed: Close returns within the
//     grace, without waiting for the check, and the Check then returns within the grace too,
//     every target down with a reason from the catalogue. The check is known to be running
//     when it has reached the endpoint: the silent server accepted its connection, or its
//     connect to the SYN-dropping listener is pending (the kernel lists a socket in SYN_SENT
//     to that address in /proc/net/tcp).
//   - CloseIdempotentAndLeakFree: a healthy checker and a hung one for each kind of endpoint,
//     each closed twice (no error, no panic); once all are closed, no goroutine started since
//     the subtest began is left (polled for 5s; the leaked stacks are printed).
//   - NoSecret: no string of Harness.Secrets, and nothing the healthy block's secret files hold
//     (config.File.Secret: a one-line file's content, a private key's lines, a kubeconfig's or
//     a service-account key's credential fields), appears in any message of the runs above, in
//     any probe trace, or in anything the checkers logged (each is given a debug-level logger).
//     A type without credentials or secret files has nothing to look for; the subtest then
//     says so and skips.
//
// Every result of every Check must name each of the checker's targets once, have Up exactly
// when its reason is Ready, a reason from the type's catalogue (checks.ValidReason), CheckedAt
// set and a message, sanitized (checks.Sanitize: valid UTF-8, no control character, at most
// checks.MaxMessageLen bytes).
//
// The kit needs from a type only what the providers file gives: the blocks are YAML mappings,
// as under the type's key (indentation is taken as written, common leading blanks removed), and
// the files they name are absolute paths. Hung gets the address (127.0.0.1:port) of a hung
// endpoint the kit starts, of one of two kinds:
//
//   - HangSilent, a TCP listener that accepts connections and never answers: the connect
//     succeeds, and whatever the type speaks over it (TLS, HTTP, SSH) waits;
//   - HangSYNDropped, a listener whose SYNs the kernel drops: the connect itself never
//     completes. It listens with a backlog of 0, and the kit fills its accept queue with one
//     connection it never accepts (the first connection completes: 0 queued is not more than
//     the backlog). Linux (tcp_conn_request) drops a SYN to a listener whose accept queue is
//     full, more queued than its backlog (sk_acceptq_is_full, 1 > 0), before it sends any
//     SYN-ACK, a SYN cookie's included, and counts it in TcpExt ListenOverflows and
//     ListenDrops; the client sends its SYN again (1s, 2s, 4s, ... up to
//     net.ipv4.tcp_syn_retries), and its connect waits until its own deadline. No firewall
//     rule is needed, and loopback never refuses. Tried on Linux 6.18 with
//     net.ipv4.tcp_syncookies 0, 1 and 2 (with 2 the first connection completes through a
//     cookie); TestSYNDroppedEndpointHangsAConnect proves it on the machine the tests run on.
//
// The Hung block must make the check connect there (and where the type has bounds of its own,
// such as a dial timeout, give them a minute, so that only the deadline or Close can end the
// check). Run counts goroutines of the whole test binary: do not call it from a parallel test
// (t.Parallel) or beside other running tests. Goroutines serving an in-process test server's
// connections (net/http.(*Server).Serve) are the server's, not the checker's, and are not
// counted as leaked.
package checkertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// Harness is what a provider type gives the kit.
type Harness struct {
	// Type is the registered provider type under test.
	Type checks.ProviderType
	// Block is the type's providers-file block (the YAML mapping under its key) of a healthy
	// provider against the type's test server; Changed is the same block with a setting changed
	// so that a reload must rebuild the checker.
	Block, Changed string
	// Targets are the targets the healthy provider reports.
	Targets []string
	// Hung returns the block of a provider whose server is at addr, a hung endpoint the kit
	// started (one of Hangs): the check must connect to it.
	Hung func(addr string) string
	// Hangs are the kinds of hung endpoint the Deadline, Abandoned and leak subtests run
	// against, each as a subtest named after it; nil is every kind, which every type that
	// speaks a protocol over its connection should keep. A type whose check is the connect
	// itself reads a listener that accepts as healthy, and gives only HangSYNDropped.
	Hangs []Hang
	// Secrets returns the credentials that must never appear in a message, a probe trace or a
	// log line (tokens, passwords, key material; none shorter than 6 bytes). It is called once
	// the checks have run, so it may include what the server issued during them. nil (or none
	// returned) is a type without credentials: there is nothing to look for.
	Secrets func() []string
}

// Hang is a kind of hung endpoint: where a check's connection stops.
type Hang int

const (
	// HangSilent is a TCP listener that accepts connections and never answers.
	HangSilent Hang = iota + 1
	// HangSYNDropped is a TCP listener whose SYNs are dropped: a connect never completes.
	HangSYNDropped
)

// Hangs are every kind of hung endpoint, the default of Harness.Hangs.
var Hangs = []Hang{HangSilent, HangSYNDropped}

// String names the kind, as its subtests are named.
func (h Hang) String() string {
	switch h {
	case HangSilent:
		return "Silent"
	case HangSYNDropped:
		return "SYNDropped"
	}
	return fmt.Sprintf("Hang(%d)", int(h))
}

const (
	// providerName is the name of the provider every loaded block belongs to.
	providerName = "conformance"
	// shortDeadline is the deadline of the Deadline subtest's check.
	shortDeadline = 300 * time.Millisecond
	// longDeadline is the deadline of a check that Close must cut: far longer than the grace,
	// so that only Close can end it in time.
	longDeadline = 3 * time.Minute
	// grace is how late a call may return past the moment it must: loose, for a loaded 2-core
	// machine under -race. A check that waits for a bound of its own, or for the long deadline,
	// is far later.
	grace = 5 * time.Second
	// connectWait is how long the hung provider's check may take to reach the hung endpoint.
	connectWait = 20 * time.Second
	// leakWait is how long goroutines are given to end after the last Close: Close cuts every
	// call of the checker, which then unwinds within the grace. A goroutine that runs on to a
	// bound of its own (a dial net/http keeps after its request was cut) is later: Close must
	// end it too.
	leakWait = grace
	// minSecretLen is the shortest secret the kit accepts: shorter strings match by chance.
	minSecretLen = 6
)

// run is the state of one Run: what the checkers said, for the NoSecret subtest.
type run struct {
	h    Harness
	typ  *checks.Type
	logs *testutil.SyncBuffer

	mu       sync.Mutex
	messages []string
	traces   []string
}

// Run runs the conformance checks of h's type, each as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	typ, ok := checks.Lookup(h.Type)
	if !ok {
		t.Fatalf("provider type %q is not registered (import its package)", h.Type)
	}
	if h.Block == "" || h.Changed == "" || len(h.Targets) == 0 || h.Hung == nil {
		t.Fatalf("the harness needs Block, Changed, Targets and Hung")
	}
	if h.Hangs == nil {
		h.Hangs = Hangs
	}
	for _, k := range h.Hangs {
		if !slices.Contains(Hangs, k) {
			t.Fatalf("Harness.Hangs: %v is not a kind of hung endpoint (%v)", k, Hangs)
		}
	}
	r := &run{h: h, typ: typ, logs: &testutil.SyncBuffer{}}
	// Later subtests build on what the earlier ones proved: a block that does not load, or a
	// checker that is not healthy, makes the rest meaningless.
	if !t.Run("Load", r.load) || !t.Run("Healthy", r.healthy) {
		return
	}
	t.Run("Deadline", func(t *testing.T) { r.eachHang(t, r.deadline) })
	t.Run("Abandoned", func(t *testing.T) { r.eachHang(t, r.abandon) })
	t.Run("CloseIdempotentAndLeakFree", r.leakFree)
	t.Run("NoSecret", r.noSecret)
}

// eachHang runs test against a hung endpoint of each kind of the harness, each as a subtest.
func (r *run) eachHang(t *testing.T, test func(*testing.T, *endpoint)) {
	for _, k := range r.h.Hangs {
		t.Run(k.String(), func(t *testing.T) { test(t, startHung(t, k)) })
	}
}

// providersFile is a providers file with one provider of the type and block as its block.
func (r *run) providersFile(block string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "providers:\n  - name: %s\n    type: %s\n    %s:\n", providerName, r.h.Type, r.h.Type)
	for _, line := range dedent(block) {
		b.WriteString("      " + line + "\n")
	}
	return b.String()
}

// dedent splits block into lines without their common leading blanks, and without blank lines
// at either end.
func dedent(block string) []string {
	lines := strings.Split(strings.TrimRight(block, " \t\n"), "\n")
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	return lines
}

// parse loads block through the real loader and returns its provider.
func (r *run) parse(t *testing.T, block string) config.Provider {
	t.Helper()
	file := r.providersFile(block)
	path := filepath.Join(t.TempDir(), "providers.yml")
	cfg, err := config.Parse(path, []byte(file))
	if err != nil {
		t.Fatalf("the providers file does not load: %v\n%s", err, file)
	}
	if len(cfg.Providers) != 1 || cfg.Providers[0].Block == nil {
		t.Fatalf("the providers file loads as %d providers, want 1 with a block:\n%s", len(cfg.Providers), file)
	}
	return cfg.Providers[0]
}

// newChecker builds the checker of block with the type's constructor and the run's logger,
// and closes it when the test ends.
func (r *run) newChecker(t *testing.T, block string) checks.Checker {
	t.Helper()
	c, err := r.typ.New(r.parse(t, block), r.logger())
	if err != nil {
		t.Fatalf("the constructor refused the block: %v", err)
	}
	if c == nil {
		t.Fatal("the constructor returned neither a checker nor an error")
	}
	if c.Name() != providerName || c.Type() != r.h.Type {
		t.Errorf("the checker is named %q of type %q, want %q of type %q", c.Name(), c.Type(), providerName, r.h.Type)
	}
	t.Cleanup(func() { _ = closeChecker(c) })
	return c
}

// logger is the debug-level logger every checker is given, scoped as the exporter scopes it.
func (r *run) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).
		With("provider", providerName)
}

// closeChecker closes c when it holds resources.
func closeChecker(c checks.Checker) error {
	if cl, ok := c.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

func (r *run) load(t *testing.T) {
	a, b := r.parse(t, r.h.Block), r.parse(t, r.h.Block)
	if !a.Equal(b) {
		t.Errorf("the same block loaded twice is not Equal: a reload would rebuild a checker that did not change")
	}
	if changed := r.parse(t, r.h.Changed); a.Equal(changed) || changed.Equal(a) {
		t.Errorf("the Changed block is Equal to the block: a reload would keep a checker whose settings changed")
	}
	if hung := r.parse(t, r.h.Hung("127.0.0.1:9")); a.Equal(hung) {
		t.Errorf("the Hung block is Equal to the block")
	}
	for _, f := range a.Block.Files() {
		if f.Path == "" {
			continue // not set: the loader leaves it out
		}
		if f.Field == "" {
			t.Errorf("file %s: no field names it", f.Path)
		}
		if !filepath.IsAbs(f.Path) {
			t.Errorf("file %s (%s) is not an absolute path", f.Path, f.Field)
		} else if _, err := os.Stat(f.Path); err != nil {
			t.Errorf("file %s (%s) of the healthy block: %v", f.Path, f.Field, err)
		}
	}
}

// record keeps what a run said, for the NoSecret subtest.
func (r *run) record(rs []checks.TargetResult, trace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range rs {
		r.messages = append(r.messages, res.Message)
	}
	if trace != "" {
		r.traces = append(r.traces, trace)
	}
}

// checkResults checks the shape of one Check's results: one per target of c, each once, and
// the invariants of every result. It returns them by target.
func (r *run) checkResults(t *testing.T, c checks.Checker, rs []checks.TargetResult) map[string]checks.TargetResult {
	t.Helper()
	r.record(rs, "")
	targets := c.Targets()
	byTarget := map[string]checks.TargetResult{}
	for _, res := range rs {
		if _, dup := byTarget[res.Target]; dup {
			t.Errorf("target %q has more than one result", res.Target)
		}
		byTarget[res.Target] = res
		if !slices.Contains(targets, res.Target) {
			t.Errorf("result for %q, which Targets() %q does not list", res.Target, targets)
		}
		r.checkResult(t, res)
	}
	for _, target := range targets {
		if _, ok := byTarget[target]; !ok {
			t.Errorf("no result for target %q (Targets() %q)", target, targets)
		}
	}
	return byTarget
}

// checkResult checks the invariants of one result.
func (r *run) checkResult(t *testing.T, res checks.TargetResult) {
	t.Helper()
	if res.Up != (res.Reason == checks.ReasonReady) {
		t.Errorf("target %q: Up %v with reason %s", res.Target, res.Up, res.Reason)
	}
	if !checks.ValidReason(r.h.Type, res.Reason) {
		t.Errorf("target %q: reason %q is not in the %s catalogue %v", res.Target, res.Reason, r.h.Type, checks.Reasons(r.h.Type))
	}
	if res.CheckedAt.IsZero() {
		t.Errorf("target %q: CheckedAt not set", res.Target)
	}
	if res.Duration < 0 {
		t.Errorf("target %q: negative Duration %v", res.Target, res.Duration)
	}
	if strings.TrimSpace(res.Message) == "" {
		t.Errorf("target %q: %s without a message", res.Target, res.Reason)
	}
	if len(res.Message) > checks.MaxMessageLen || !utf8.ValidString(res.Message) ||
		strings.ContainsFunc(res.Message, func(r rune) bool { return unicode.IsControl(r) }) {
		t.Errorf("target %q: message %q is not sanitized: want valid UTF-8 of at most %d bytes without control characters (checks.Sanitize)",
			res.Target, res.Message, checks.MaxMessageLen)
	}
}

// checkHealthy runs one Check of c, which must find every target of the harness Ready.
func (r *run) checkHealthy(t *testing.T, c checks.Checker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := r.checkResults(t, c, c.Check(ctx))
	for _, res := range got {
		if res.Reason != checks.ReasonReady {
			t.Errorf("target %q: %s (%s), want Ready", res.Target, res.Reason, res.Message)
		}
	}
}

func (r *run) healthy(t *testing.T) {
	c := r.newChecker(t, r.h.Block)
	want := slices.Sorted(slices.Values(r.h.Targets))
	if got := slices.Sorted(slices.Values(c.Targets())); !slices.Equal(got, want) {
		t.Fatalf("Targets() = %q, want %q", c.Targets(), r.h.Targets)
	}
	r.checkHealthy(t, c)

	if p, ok := c.(checks.TargetProber); ok {
		for _, target := range r.h.Targets {
			trace := checks.NewTrace()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res, err := p.ProbeTarget(ctx, target, trace)
			cancel()
			r.record([]checks.TargetResult{res}, trace.String())
			if err != nil {
				t.Errorf("ProbeTarget(%q): %v", target, err)
				continue
			}
			if res.Target != target || res.Reason != checks.ReasonReady {
				t.Errorf("ProbeTarget(%q): target %q, %s (%s), want Ready", target, res.Target, res.Reason, res.Message)
			}
			r.checkResult(t, res)
			if len(trace.Stages()) == 0 {
				t.Errorf("ProbeTarget(%q) recorded no stage in its trace", target)
			}
		}
		unknown := "not-a-target-of-" + providerName
		if _, err := p.ProbeTarget(context.Background(), unknown, checks.NewTrace()); !errors.Is(err, checks.ErrUnknownTarget) {
			t.Errorf("ProbeTarget of a target it does not list: %v, want checks.ErrUnknownTarget", err)
		}
	}

	if s, ok := c.(checks.Staler); ok && s.Stale() {
		t.Errorf("a healthy checker asks to be rebuilt at a reload (Stale)")
	}

	if rt, ok := c.(checks.Retargeter); ok {
		n, ok := rt.Retarget(r.parse(t, r.h.Block), r.logger())
		if !ok || n == nil {
			t.Fatalf("Retarget with the same block refused (ok %v)", ok)
		}
		t.Cleanup(func() { _ = closeChecker(n) })
		// Closing the old checker must leave the new one what it took over.
		if err := closeChecker(c); err != nil {
			t.Errorf("Close of the retargeted checker: %v", err)
		}
		r.checkHealthy(t, n)
	}
}

func (r *run) deadline(t *testing.T, e *endpoint) {
	c := r.newChecker(t, r.h.Hung(e.addr))
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	start := time.Now()
	rs := c.Check(ctx)
	elapsed := time.Since(start)
	if elapsed > shortDeadline+grace {
		t.Errorf("Check returned %v after it started, with a %v deadline (allowed: up to %v past it)", elapsed, shortDeadline, grace)
	}
	r.checkDown(t, c, e, rs)

	if p, ok := c.(checks.TargetProber); ok {
		target := c.Targets()[0]
		trace := checks.NewTrace()
		ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
		defer cancel()
		start := time.Now()
		res, err := p.ProbeTarget(ctx, target, trace)
		elapsed := time.Since(start)
		r.record([]checks.TargetResult{res}, trace.String())
		if elapsed > shortDeadline+grace {
			t.Errorf("ProbeTarget returned %v after it started, with a %v deadline (allowed: up to %v past it)", elapsed, shortDeadline, grace)
		}
		switch {
		case errors.Is(err, checks.ErrBusy):
		case err != nil:
			t.Errorf("ProbeTarget(%q) of the hung provider: %v", target, err)
		case res.Up:
			t.Errorf("ProbeTarget(%q): up (%s) although %s", target, res.Message, e.hangs)
		default:
			r.checkResult(t, res)
		}
	}
}

// checkDown checks the results of a check of the hung provider at e: every target down.
func (r *run) checkDown(t *testing.T, c checks.Checker, e *endpoint, rs []checks.TargetResult) {
	t.Helper()
	for _, res := range r.checkResults(t, c, rs) {
		if res.Up {
			t.Errorf("target %q is up (%s) although %s", res.Target, res.Message, e.hangs)
		}
	}
}

// abandon runs a check of the hung provider at e with a long deadline, closes the checker
// once the check has reached e, and checks that both return in time.
func (r *run) abandon(t *testing.T, e *endpoint) {
	t.Helper()
	c := r.newChecker(t, r.h.Hung(e.addr))
	ctx, cancel := context.WithTimeout(context.Background(), longDeadline)
	defer cancel()
	checked := make(chan []checks.TargetResult, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		checked <- c.Check(ctx)
	}()
	defer func() {
		// Whatever failed, the check must not outlive the test.
		cancel()
		<-returned
	}()

	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	give := time.After(connectWait)
	for !e.reached() {
		select {
		case rs := <-checked:
			r.checkDown(t, c, e, rs)
			t.Fatalf("the check of the Hung block returned without reaching the %v endpoint %s", e.kind, e.addr)
		case <-give:
			t.Fatalf("the check of the Hung block did not reach the %v endpoint %s within %v (%s)", e.kind, e.addr, connectWait, e.reachedMeans)
		case <-poll.C:
		}
	}

	closed := make(chan error, 1)
	closeStart := time.Now()
	go func() { closed <- closeChecker(c) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close during a check: %v", err)
		}
	case <-time.After(grace):
		t.Errorf("Close did not return within %v while a check was running: it must not wait for the check", grace)
	}
	select {
	case rs := <-checked:
		r.checkDown(t, c, e, rs)
	case <-time.After(grace):
		t.Errorf("the check did not return within %v of Close (its deadline is %v away)", grace, longDeadline-time.Since(closeStart))
	}
	if err := closeChecker(c); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func (r *run) leakFree(t *testing.T) {
	// The endpoints live until the test ends: started before the count.
	var hung []*endpoint
	for _, k := range r.h.Hangs {
		hung = append(hung, startHung(t, k))
	}
	before := goroutines()

	c := r.newChecker(t, r.h.Block)
	r.checkHealthy(t, c)
	if p, ok := c.(checks.TargetProber); ok {
		trace := checks.NewTrace()
		res, err := p.ProbeTarget(context.Background(), r.h.Targets[0], trace)
		r.record([]checks.TargetResult{res}, trace.String())
		if err != nil {
			t.Errorf("ProbeTarget(%q): %v", r.h.Targets[0], err)
		}
	}
	for i := range 2 {
		if err := closeChecker(c); err != nil {
			t.Errorf("Close #%d of the healthy checker: %v", i+1, err)
		}
	}
	for _, e := range hung {
		t.Run(e.kind.String(), func(t *testing.T) { r.abandon(t, e) })
	}

	var leaked []string
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		leaked = leaked[:0]
		for id, stack := range goroutines() {
			if _, old := before[id]; !old && !serverSide(stack) {
				leaked = append(leaked, stack)
			}
		}
		if len(leaked) == 0 || time.Since(start) > leakWait {
			break
		}
	}
	if len(leaked) > 0 {
		t.Errorf("%d goroutine(s) started by the checkers still run %v after they were closed:\n\n%s",
			len(leaked), leakWait, strings.Join(leaked, "\n\n"))
	}
}

func (r *run) noSecret(t *testing.T) {
	var secrets []string
	if r.h.Secrets != nil {
		secrets = r.h.Secrets()
	}
	secrets = append(secrets, r.secretFileContents(t)...)
	if len(secrets) == 0 {
		t.Skip("the type has no secrets (Harness.Secrets gives none, its block names no secret file): nothing to look for")
	}
	r.mu.Lock()
	messages := strings.Join(r.messages, "\n")
	traces := strings.Join(r.traces, "\n")
	r.mu.Unlock()
	logs := r.logs.String()
	if messages == "" {
		t.Fatal("no message was recorded: the search below would prove nothing")
	}
	for i, s := range secrets {
		if len(s) < minSecretLen {
			t.Errorf("secret %d is shorter than %d bytes: it would match by chance", i, minSecretLen)
			continue
		}
		// The logs are JSON: a secret with quotes or line breaks appears escaped.
		quoted, _ := json.Marshal(s)
		forms := []string{s, strings.Trim(string(quoted), `"`), strings.Trim(strconv.Quote(s), `"`)}
		for _, f := range forms {
			if strings.Contains(messages, f) {
				t.Errorf("secret %d appears in a result message", i)
			}
			if strings.Contains(traces, f) {
				t.Errorf("secret %d appears in a probe trace", i)
			}
			if strings.Contains(logs, f) {
				t.Errorf("secret %d appears in the logs", i)
			}
		}
	}
}

// secretFileContents are the credentials the secret files of the healthy block hold
// (config.File.Secret): a one-line file's content (a password, a passphrase), each line of a
// private key block, and the values of the usual credential fields of a YAML or JSON file (a
// kubeconfig's token, password and client-key-data, a service-account key's private_key_id).
func (r *run) secretFileContents(t *testing.T) []string {
	var out []string
	add := func(s string) {
		if s = strings.TrimSpace(s); len(s) >= minSecretLen {
			out = append(out, s)
		}
	}
	keyLines := func(s string) {
		inKey := false
		for line := range strings.Lines(s) {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "-----BEGIN") && strings.Contains(line, "PRIVATE KEY"):
				inKey = true
			case strings.HasPrefix(line, "-----END"):
				inKey = false
			case inKey:
				add(line)
			}
		}
	}
	for _, f := range r.parse(t, r.h.Block).Block.Files() {
		if !f.Secret || f.Path == "" {
			continue
		}
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatalf("secret file %s (%s): %v", f.Path, f.Field, err)
		}
		if s := strings.TrimSpace(string(b)); !strings.ContainsAny(s, "\r\n") {
			add(s)
		}
		keyLines(string(b))
		var doc map[string]any
		if yaml.Unmarshal(b, &doc) != nil {
			continue
		}
		var walk func(v any, key string)
		walk = func(v any, key string) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					walk(e, k)
				}
			case []any:
				for _, e := range v {
					walk(e, key)
				}
			case string:
				switch key {
				case "token", "password", "private_key_id", "client_secret", "refresh_token":
					add(v)
				case "private_key":
					keyLines(v)
				case "client-key-data":
					if d, err := base64.StdEncoding.DecodeString(v); err == nil {
						keyLines(string(d))
					}
				}
			}
		}
		walk(doc, "")
	}
	return out
}

// endpoint is a hung endpoint the kit started.
type endpoint struct {
	kind Hang
	addr string
	// hangs says, for a failure, why no check against it may succeed.
	hangs string
	// reached reports, without blocking, whether a check has reached the endpoint;
	// reachedMeans says what that is, for a failure.
	reached      func() bool
	reachedMeans string
}

// startHung starts a hung endpoint of kind k on loopback; the test's cleanup closes it.
func startHung(t *testing.T, k Hang) *endpoint {
	t.Helper()
	if k == HangSYNDropped {
		return startSYNDropped(t)
	}
	return startSilent(t)
}

// Silent starts a TCP listener on 127.0.0.1 that accepts connections and never writes (a
// server that hangs), for a type's own tests; it returns host:port and closes with the test.
func Silent(t *testing.T) string {
	t.Helper()
	return startSilent(t).addr
}

// SYNDropped starts a TCP listener on 127.0.0.1 whose SYNs are dropped (a connect to it never
// completes: see the package's comment), for a type's own tests; it returns host:port and
// closes with the test.
func SYNDropped(t *testing.T) string {
	t.Helper()
	return startSYNDropped(t).addr
}

// startSilent starts a listener that accepts connections and never writes to them; the test's
// cleanup closes it and every connection it accepted.
func startSilent(t *testing.T) *endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	accepted := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			once.Do(func() { close(accepted) })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return &endpoint{
		kind: HangSilent, addr: ln.Addr().String(), hangs: "its server never answers",
		reached: func() bool {
			select {
			case <-accepted:
				return true
			default:
				return false
			}
		},
		reachedMeans: "the server accepts a connection",
	}
}

// startSYNDropped starts a listener with a backlog of 0 and fills its accept queue with one
// connection it never accepts, so that the kernel drops every later SYN; the test's cleanup
// closes both.
func startSYNDropped(t *testing.T) *endpoint {
	t.Helper()
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		testenv.Unavailable(t, "the SYN-dropped endpoint needs Linux (its accept queue is read from /proc/net/tcp): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	// Go listens with the kernel's somaxconn; a second listen(2) on a listening socket sets
	// its backlog again.
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var listenErr error
	if err := raw.Control(func(fd uintptr) { listenErr = syscall.Listen(int(fd), 0) }); err != nil || listenErr != nil {
		t.Fatalf("listen again with a backlog of 0: %v %v", err, listenErr)
	}
	addr := ln.Addr().String()
	fill, err := net.DialTimeout("tcp", addr, grace)
	if err != nil {
		t.Fatalf("the connection that fills the accept queue of %s: %v", addr, err)
	}
	t.Cleanup(func() { fill.Close() })
	// The client's connect returns when it sent the handshake's last ACK; the queue is full
	// once the kernel has queued the connection that ACK completes.
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		n, err := acceptQueue(addr)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Since(start) > grace {
			t.Fatalf("the kernel does not queue the connection to %s (backlog 0) that fills its accept queue", addr)
		}
	}
	return &endpoint{
		kind: HangSYNDropped, addr: addr, hangs: "a connect to its endpoint never completes",
		reached: func() bool {
			ok, err := connecting(addr)
			if err != nil {
				t.Error(err)
			}
			return ok
		},
		reachedMeans: "a socket in SYN_SENT to it in /proc/net/tcp",
	}
}

// tcpSocket is one TCP socket of the network namespace, as /proc/net/tcp and /proc/net/tcp6
// list it: addresses in the kernel's hex form, the state's number, and rx_queue (for a
// listener, the length of its accept queue).
type tcpSocket struct {
	local, remote, state string
	rxQueue              int
}

// The states of tcpSocket (include/net/tcp_states.h).
const (
	stateSYNSent = "02"
	stateListen  = "0A"
)

// tcpSockets reads the TCP sockets of the process's network namespace.
func tcpSockets() ([]tcpSocket, error) {
	var out []tcpSocket
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) && file == "/proc/net/tcp6" {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, err
		}
		lines := strings.Split(string(data), "\n")
		for _, line := range lines[1:] { // after the header
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			_, rx, _ := strings.Cut(f[4], ":")
			n, _ := strconv.ParseInt(rx, 16, 64)
			out = append(out, tcpSocket{local: f[1], remote: f[2], state: f[3], rxQueue: int(n)})
		}
	}
	return out, nil
}

// procAddrs are the forms addr (127.0.0.1:port) takes in /proc/net/tcp and, v4-mapped, in
// /proc/net/tcp6: each 32-bit word of the address in the machine's byte order, then the port.
func procAddrs(addr string) []string {
	ap := netip.MustParseAddrPort(addr)
	words := func(b []byte) string {
		var s strings.Builder
		for i := 0; i < len(b); i += 4 {
			fmt.Fprintf(&s, "%08X", binary.NativeEndian.Uint32(b[i:i+4]))
		}
		return fmt.Sprintf("%s:%04X", s.String(), ap.Port())
	}
	v4, v6 := ap.Addr().As4(), ap.Addr().As16()
	return []string{words(v4[:]), words(v6[:])}
}

// acceptQueue is how many connections wait in the accept queue of the listener at addr.
func acceptQueue(addr string) (int, error) {
	socks, err := tcpSockets()
	if err != nil {
		return 0, err
	}
	forms := procAddrs(addr)
	for _, s := range socks {
		if s.state == stateListen && slices.Contains(forms, s.local) {
			return s.rxQueue, nil
		}
	}
	return 0, fmt.Errorf("no listener at %s in /proc/net/tcp", addr)
}

// connecting reports whether a socket of the network namespace is connecting to addr (in
// SYN_SENT: its SYN sent, no answer).
func connecting(addr string) (bool, error) {
	socks, err := tcpSockets()
	if err != nil {
		return false, err
	}
	forms := procAddrs(addr)
	return slices.ContainsFunc(socks, func(s tcpSocket) bool {
		return s.state == stateSYNSent && slices.Contains(forms, s.remote)
	}), nil
}

// goroutines returns the stack of every goroutine of the process, by goroutine id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		stack := string(g)
		rest, ok := strings.CutPrefix(stack, "goroutine ")
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, " ")
		out[id] = stack
	}
	return out
}

// serverSide reports a goroutine that serves a connection of an in-process server (a test
// server's, not the checker's).
func serverSide(stack string) bool {
	return strings.Contains(stack, "created by net/http.(*Server).Serve")
}
