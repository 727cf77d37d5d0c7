package shard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// labFleet is a kvm provider "lab" of n hosts, one in seven down with a message of its own.
func labFleet(n int, message string, now time.Time) *checks.Snapshot {
	p := checks.ProviderState{Name: "lab", Type: "kvm", Thresholds: checks.Thresholds{Failure: 3, Success: 2}}
	for i := range n {
		up := i%7 != 0
		reason := checks.ReasonReady
		if !up {
			reason = "SSHHandshakeFailed"
		}
		p.Targets = append(p.Targets, checks.TargetState{
			TargetResult: checks.TargetResult{Target: fmt.Sprintf("hv-%05d.rack-%d.example.org", i, i%40), Up: up, Reason: reason,
				Message: fmt.Sprintf("%s %d", message, i), CheckedAt: now},
			Since: now.Add(-time.Duration(i) * time.Second), ConsecutiveFailures: i % 3, ConsecutiveSuccesses: i % 5,
		})
	}
	return &checks.Snapshot{Round: 1, Providers: []checks.ProviderState{p}}
}

// labReader reads parts as a replica configured with snap's providers and targets.
func labReader(snap *checks.Snapshot, now time.Time) *partReader {
	r := &partReader{providers: map[string]configuredProvider{}, now: now}
	for _, p := range snap.Providers {
		cp := configuredProvider{typ: p.Type, targets: map[string]bool{}, reasons: map[checks.Reason]bool{}}
		for _, reason := range checks.Reasons(p.Type) {
			cp.reasons[reason] = true
		}
		for _, t := range p.Targets {
			cp.targets[t.Target] = true
		}
		r.providers[p.Name] = cp
		r.maxVerdicts += len(p.Targets)
	}
	return r
}

// A part reads back as it was written: verdicts, Since, counts capped at the thresholds, and
// messages; nothing under another type.
func TestShardPartRoundTrip(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	snap := labFleet(50, "libvirt answered: 3 domains running", now)
	enc := encodePart(snap, MaxPart)
	if enc.left != 0 || enc.verdicts != 50 {
		t.Fatalf("50 verdicts: %d kept, %d left out", enc.verdicts, enc.left)
	}
	p, err := labReader(snap, now).decodePart(enc.data)
	if err != nil {
		t.Fatal(err)
	}
	if p.rejected != 0 {
		t.Errorf("%d verdicts rejected from a good part", p.rejected)
	}
	for _, want := range snap.Providers[0].Targets {
		got := p.verdict("lab", "kvm", want.Target)
		if got == nil {
			t.Fatalf("%s missing from the part", want.Target)
		}
		st := got.state(now)
		if st.Up != want.Up || st.Reason != want.Reason || st.Message != want.Message || !st.Since.Equal(want.Since) ||
			st.ConsecutiveFailures != min(want.ConsecutiveFailures, 3) || st.ConsecutiveSuccesses != min(want.ConsecutiveSuccesses, 2) {
			t.Fatalf("%s reads back as %+v, want %+v (counts capped at 3 and 2)", want.Target, st, want)
		}
	}
	if p.verdict("lab", "gcp", snap.Providers[0].Targets[0].Target) != nil {
		t.Error("a verdict read back under another provider type")
	}
}

// A steady fleet's part does not change from round to round: its key stays while only the
// check times and the counts beyond the thresholds move, so it is not rewritten; a flip
// changes the key.
func TestShardPartKeyOnlyChangesWithVerdicts(t *testing.T) {
	now := time.Now()
	a := encodePart(labFleet(500, "pool default: 1.2 TiB free", now), MaxPart)
	next := labFleet(500, "pool default: 1.1 TiB free", now)
	for i := range next.Providers[0].Targets {
		next.Providers[0].Targets[i].CheckedAt = now.Add(time.Minute)
		next.Providers[0].Targets[i].ConsecutiveFailures += 10
		next.Providers[0].Targets[i].ConsecutiveSuccesses += 10
	}
	base := labFleet(500, "", now)
	for i := range base.Providers[0].Targets {
		base.Providers[0].Targets[i].ConsecutiveFailures += 10
		base.Providers[0].Targets[i].ConsecutiveSuccesses += 10
	}
	b := encodePart(next, MaxPart)
	c := encodePart(base, MaxPart)
	if b.key != c.key {
		t.Error("the key depends on the messages")
	}
	if bytes.Equal(a.data, b.data) {
		t.Fatal("the test needs data that differ")
	}
	flipped := labFleet(500, "", now)
	flipped.Providers[0].Targets[1].Up, flipped.Providers[0].Targets[1].Reason = false, "TCPUnreachable"
	if d := encodePart(flipped, MaxPart); d.key == encodePart(labFleet(500, "", now), MaxPart).key {
		t.Error("a flip left the key as it was")
	}
}

// A part too large for its bound loses messages target by target, longest first, then
// verdicts, counted; it never exceeds the bound and what it keeps reads back.
func TestShardPartTrimsLongestMessagesFirst(t *testing.T) {
	now := time.Now()
	snap := labFleet(3000, "short", now)
	for i := 0; i < 3000; i += 10 {
		// A unique error text, as little compressible as real ones.
		var msg strings.Builder
		for j := range 4 {
			fmt.Fprintf(&msg, "%x ", sha256.Sum256([]byte(fmt.Sprint(i, j))))
		}
		snap.Providers[0].Targets[i].Message = msg.String()
	}
	full := encodePart(snap, MaxPart)
	bound := len(full.data) * 3 / 4
	enc := encodePart(snap, bound)
	if len(enc.data) > bound {
		t.Fatalf("%d bytes, above the bound %d", len(enc.data), bound)
	}
	if enc.left != 0 {
		t.Errorf("%d verdicts left out: dropping long messages was enough", enc.left)
	}
	p, err := labReader(snap, now).decodePart(enc.data)
	if err != nil {
		t.Fatal(err)
	}
	shortKept := 0
	for i, want := range snap.Providers[0].Targets {
		got := p.verdict("lab", "kvm", want.Target)
		if i%10 == 0 && got.Message == want.Message {
			t.Errorf("%s kept its long message while others were dropped", want.Target)
		}
		if i%10 != 0 && got.Message == want.Message {
			shortKept++
		}
	}
	if shortKept < 2700-10 {
		t.Errorf("only %d short messages kept; the long ones go first", shortKept)
	}

	tiny := encodePart(snap, 2000)
	if len(tiny.data) > 2000 || tiny.left == 0 || tiny.verdicts+tiny.left != 3000 {
		t.Errorf("bound 2,000 bytes: %d bytes, %d kept, %d left out", len(tiny.data), tiny.verdicts, tiny.left)
	}
}

// What a part holds is checked before it counts: unknown providers, targets and reasons,
// negative counts, a Since in the future and duplicates are dropped; messages are sanitized
// like local ones.
func TestShardPartChecked(t *testing.T) {
	now := time.Now()
	snap := labFleet(3, "", now)
	r := labReader(snap, now)
	hv := func(i int) string { return snap.Providers[0].Targets[i].Target }
	lines := []string{
		`{"v":2,"n":9}`,
		`{"p":"lab","y":"kvm","t":"` + hv(0) + `","u":true,"r":"Ready","s":1}`,
		`{"p":"lab","y":"kvm","t":"` + hv(0) + `","r":"TCPUnreachable","s":1}`,
		`{"p":"lab","y":"kvm","t":"` + hv(1) + `","r":"TCPUnreachable","s":1,"f":-5}`,
		`{"p":"lab","y":"kvm","t":"` + hv(2) + `","r":"NoSuchReason","s":1}`,
		`{"p":"lab","y":"kvm","t":"hv-unknown","r":"TCPUnreachable","s":1}`,
		`{"p":"other","y":"kvm","t":"` + hv(1) + `","r":"TCPUnreachable","s":1}`,
		`{"p":"lab","y":"gcp","t":"` + hv(1) + `","r":"TCPUnreachable","s":1}`,
		fmt.Sprintf(`{"p":"lab","y":"kvm","t":"%s","r":"TCPUnreachable","s":%d}`, hv(2), now.Add(time.Hour).UnixMilli()),
		`{"p":"lab","y":"kvm","t":"` + hv(1) + `","r":"TCPUnreachable","s":1,"f":3,"m":"dial: password=hunter2 refused"}`,
		`not json`,
	}
	p, err := r.decodePart(gzipLines(lines...))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.providers["lab"].order); got != 2 {
		t.Errorf("%d verdicts kept, want 2: %v", got, p.providers["lab"].order)
	}
	if p.rejected != 8 {
		t.Errorf("%d rejected, want 8", p.rejected)
	}
	if v := p.verdict("lab", "kvm", hv(0)); v == nil || !v.Up {
		t.Errorf("%s: %+v, want the first verdict kept", hv(0), v)
	}
	v := p.verdict("lab", "kvm", hv(1))
	if v == nil || v.Failures != 3 || strings.Contains(v.Message, "hunter2") {
		t.Errorf("%s: %+v, want the verdict with 3 failures, its secret redacted", hv(1), v)
	}

	// The version comes first: a part of another version is refused before any verdict.
	if _, err := r.decodePart(gzipLines(`{"v":1,"n":1}`, lines[1])); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("version 1: %v, want a refusal naming the version", err)
	}
	// More verdicts than the replica has targets: refused.
	many := []string{`{"v":2,"n":4}`}
	for i := range 3 {
		many = append(many, `{"p":"lab","y":"kvm","t":"`+hv(i)+`","u":true,"r":"Ready","s":1}`)
	}
	r.maxVerdicts = 2
	if _, err := r.decodePart(gzipLines(many...)); err == nil {
		t.Error("a part with more verdicts than the reader takes was read")
	}
}

// A compression bomb (about 20 KiB of gzip inflating to 6 MB of verdicts) costs the reader
// little memory: it streams, keeps only what its configuration has, and stops at its bounds.
func TestShardPartBomb(t *testing.T) {
	now := time.Now()
	snap := labFleet(3, "", now)
	var raw bytes.Buffer
	raw.WriteString(`{"v":2,"n":1}` + "\n")
	unknown := `{"p":"lab","y":"kvm","t":"hv-not-configured","r":"TCPUnreachable","s":1}` + "\n"
	known := `{"p":"lab","y":"kvm","t":"` + snap.Providers[0].Targets[0].Target + `","r":"TCPUnreachable","s":1}` + "\n"
	for raw.Len() < 6<<20 {
		raw.WriteString(unknown)
		raw.WriteString(known)
	}
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	_, _ = zw.Write(raw.Bytes())
	_ = zw.Close()
	if z.Len() > 24<<10 {
		t.Fatalf("the bomb is %d bytes of gzip; the test wants a small one", z.Len())
	}
	r := labReader(snap, now)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := r.decodePart(z.Bytes())
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.providers["lab"].order) != 1 || p.rejected < 80_000 {
		t.Errorf("kept %d providers, rejected %d; want one verdict kept, every other line rejected", len(p.providers), p.rejected)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 50<<20 {
		t.Errorf("the heap grew by %d MiB reading a %d KiB bomb; want under 50", grew>>20, z.Len()>>10)
	}
}

func gzipLines(lines ...string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(strings.Join(lines, "\n") + "\n"))
	_ = zw.Close()
	return b.Bytes()
}

// No part makes decodePart panic, keep more than its bound, or allocate more than 512 MiB in all.
func FuzzDecodePart(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	snap := labFleet(4, "msg", now)
	f.Add(encodePart(snap, MaxPart).data)
	f.Add([]byte{})
	f.Add([]byte("not gzip"))
	f.Add(gzipLines(`{"v":2,"n":1}`, `{"p":"lab","y":"kvm","t":"hv-00001.rack-1.example.org","r":"Ready","u":true,"s":1,"f":-1}`))
	f.Add(gzipLines(`{"v":3}`))
	r := labReader(snap, now)
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := r.decodePart(data)
		runtime.ReadMemStats(&after)
		if err == nil && p == nil {
			t.Fatal("no part and no error")
		}
		if err == nil {
			n := 0
			for _, v := range p.providers {
				n += len(v.order)
			}
			if n > r.maxVerdicts {
				t.Fatalf("%d verdicts kept, more than %d", n, r.maxVerdicts)
			}
		}
		if after.TotalAlloc-before.TotalAlloc > 512<<20 {
			t.Fatalf("decoding %d bytes allocated %d MiB", len(data), (after.TotalAlloc-before.TotalAlloc)>>20)
		}
	})
}
