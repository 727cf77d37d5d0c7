package shard

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	rendezvous "github.com/provider-health-exporter/provider-health-exporter/checks/shard"
)

// A sharded replica's part is what it publishes in its ProviderHealthPart object
// (membership.go): the verdicts of the targets it reports, with their consecutive counts. The
// writer's leader folds the members' parts into whole ProviderHealth objects (fleet.go), an old
// owner stops reporting a target once its new owner's part has it, and a new owner goes on
// from the counts the old one published (checks.Carried).
//
// Encoded as gzip-compressed JSON lines: a header line (partHeader: the version first, then
// the number of verdicts), then one line per verdict (partLine). A part carries no per-target
// time: its verdicts were checked in the round its object names (Part's CheckedAt,
// RoundAt). Counts are capped at the provider's thresholds (beyond them they change no
// decision), so that a steady fleet's part does not change from round to round and is not
// rewritten. Messages are clipped to maxPartMessage bytes; a part larger than
// MaxPart loses messages, longest first, then verdicts (counted in
// proxy_operator_shard_unpublished_targets).
const (
	partVersion    = 2
	maxPartMessage = 256
	// maxPartJSON bounds the bytes a part may inflate to (a CPU bound: decoding streams, so
	// memory stays bounded by the verdicts kept, never by this).
	maxPartJSON = 32 << 20
	// maxPartLine bounds one line of a part: a verdict with two names at the longest and its
	// message.
	maxPartLine = 4 << 10
	// maxPartSkew is how far in the future a time a part carries may be, for clocks that
	// disagree; a verdict beyond it is dropped.
	maxPartSkew = time.Minute
	// maxPartCount bounds a carried count, whatever the thresholds.
	maxPartCount = 1 << 20
)

type partHeader struct {
	Version  int `json:"v"`
	Verdicts int `json:"n"`
}

// partLine is one verdict; Since in Unix milliseconds.
type partLine struct {
	Provider  string              `json:"p"`
	Type      checks.ProviderType `json:"y"`
	Target    string              `json:"t"`
	Up        bool                `json:"u,omitempty"`
	Reason    checks.Reason       `json:"r"`
	Message   string              `json:"m,omitempty"`
	Since     int64               `json:"s"`
	Failures  int                 `json:"f,omitempty"`
	Successes int                 `json:"k,omitempty"`
}

// encodedPart is this replica's part of one snapshot.
type encodedPart struct {
	data []byte
	// key is a digest of the verdicts without their messages: what must go out at once.
	key      string
	verdicts int
	// left counts the verdicts left out to stay within MaxPart.
	left int
}

// encodePart returns snap's verdicts as a part of at most max bytes.
func encodePart(snap *checks.Snapshot, max int) encodedPart {
	var lines []partLine
	for _, p := range snap.Providers {
		th := p.Thresholds
		for i := range p.Targets {
			t := &p.Targets[i]
			lines = append(lines, partLine{
				Provider: p.Name, Type: p.Type, Target: t.Target, Up: t.Up, Reason: t.Reason,
				Message:   checks.Clip(t.Message, maxPartMessage),
				Since:     t.Since.UnixMilli(),
				Failures:  min(t.ConsecutiveFailures, max1(th.Failure)),
				Successes: min(t.ConsecutiveSuccesses, max1(th.Success)),
			})
		}
	}
	key := partKey(lines)
	data := encodeLines(lines)
	if len(data) <= max {
		return encodedPart{data: data, key: key, verdicts: len(lines)}
	}
	// Too large: messages go, longest first, as few as will do (a binary search over how
	// many), then verdicts, last first, likewise.
	byLength := make([]int, 0, len(lines))
	for i := range lines {
		if lines[i].Message != "" {
			byLength = append(byLength, i)
		}
	}
	slices.SortStableFunc(byLength, func(a, b int) int { return cmp.Compare(len(lines[b].Message), len(lines[a].Message)) })
	withoutMessages := func(k int) []partLine {
		out := slices.Clone(lines)
		for _, i := range byLength[:k] {
			out[i].Message = ""
		}
		return out
	}
	if all := withoutMessages(len(byLength)); len(encodeLines(all)) > max {
		// Even without messages it does not fit: as many verdicts as fit, without messages.
		keep := sort.Search(len(all)+1, func(n int) bool { return len(encodeLines(all[:n])) > max }) - 1
		keep = max0(keep)
		return encodedPart{data: encodeLines(all[:keep]), key: partKey(all[:keep]), verdicts: keep, left: len(all) - keep}
	}
	k := sort.Search(len(byLength)+1, func(k int) bool { return len(encodeLines(withoutMessages(k))) <= max })
	trimmed := withoutMessages(k)
	return encodedPart{data: encodeLines(trimmed), key: key, verdicts: len(trimmed)}
}

func max0(n int) int { return max(n, 0) }

func max1(n int) int { return max(n, 1) }

// encodeLines is the part of lines: its header, then one line each, compressed.
func encodeLines(lines []partLine) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	enc := json.NewEncoder(zw)
	// Encoding structs of strings, numbers and booleans cannot fail, nor can writing to a
	// bytes.Buffer.
	_ = enc.Encode(partHeader{Version: partVersion, Verdicts: len(lines)})
	for i := range lines {
		_ = enc.Encode(&lines[i])
	}
	_ = zw.Close()
	return b.Bytes()
}

// partKey digests lines without their messages.
func partKey(lines []partLine) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, l := range lines {
		l.Message = ""
		_ = enc.Encode(&l)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// part is a decoded part: each provider's verdicts by target, and the ownership keys it
// reports.
type part struct {
	providers map[string]*partProviderView
	keys      map[string]bool
	// checkedAt is when its verdicts were checked: the end of the round that wrote or last
	// confirmed it.
	checkedAt time.Time
	// rejected counts the verdicts dropped by the checks of decodePart.
	rejected int
}

type partProviderView struct {
	typ     checks.ProviderType
	order   []string
	targets map[string]*partLine
}

// partReader is what a replica knows to check a part against: its own configuration.
type partReader struct {
	// providers are the configured providers: their type and, for a PerTarget type, their
	// targets (the only ones a part may report); a provider owned whole may report any targets,
	// at most maxWholeTargets.
	providers map[string]configuredProvider
	// maxVerdicts bounds the verdicts kept from one part.
	maxVerdicts int
	now         time.Time
}

type configuredProvider struct {
	typ     checks.ProviderType
	targets map[string]bool
	reasons map[checks.Reason]bool
}

// maxWholeTargets bounds the targets a part may report for a provider owned whole (a
// vSphere provider discovers its hosts).
const maxWholeTargets = 10_000

// errPartVersion is a part of a version this replica does not read.
var errPartVersion = errors.New("unknown part version")

// decodePart reads data, a part, streaming: the version first, then each verdict, kept only
// when it is about a configured provider and target, of a reason of the type's catalogue,
// with counts at least 0 and capped, and a Since not in the future beyond maxPartSkew;
// messages are sanitized like local ones. Memory is bounded by the verdicts kept (at most
// r.maxVerdicts), whatever data inflates to.
func (r *partReader) decodePart(data []byte) (*part, error) {
	p := &part{providers: map[string]*partProviderView{}, keys: map[string]bool{}}
	if len(data) == 0 {
		return p, nil
	}
	if len(data) > MaxPart {
		return nil, fmt.Errorf("%d bytes, more than %d", len(data), MaxPart)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	br := bufio.NewReaderSize(io.LimitReader(zr, maxPartJSON), maxPartLine)
	line, err := readLine(br)
	if err != nil {
		return nil, fmt.Errorf("no header: %w", err)
	}
	var h partHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("no header: %w", err)
	}
	if h.Version != partVersion {
		return nil, fmt.Errorf("%w %d, this replica reads version %d", errPartVersion, h.Version, partVersion)
	}
	kept := 0
	deadline := r.now.Add(maxPartSkew).UnixMilli()
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			return p, nil
		}
		if err != nil {
			return nil, err
		}
		var l partLine
		if json.Unmarshal(line, &l) != nil {
			p.rejected++
			continue
		}
		cp, ok := r.providers[l.Provider]
		perTarget := checks.PerTarget(l.Type)
		if !ok || cp.typ != l.Type || !cp.reasons[l.Reason] || (l.Reason == checks.ReasonReady) != l.Up ||
			perTarget && !cp.targets[l.Target] || l.Target == "" ||
			l.Failures < 0 || l.Successes < 0 || l.Since < 0 || l.Since > deadline {
			p.rejected++
			continue
		}
		v := p.providers[l.Provider]
		if v == nil {
			v = &partProviderView{typ: l.Type, targets: map[string]*partLine{}}
			p.providers[l.Provider] = v
		}
		if v.targets[l.Target] != nil || !perTarget && len(v.order) >= maxWholeTargets {
			p.rejected++
			continue
		}
		if kept >= r.maxVerdicts {
			return nil, fmt.Errorf("more than %d verdicts", r.maxVerdicts)
		}
		kept++
		l.Failures, l.Successes = min(l.Failures, maxPartCount), min(l.Successes, maxPartCount)
		l.Message = checks.Sanitize(checks.Clip(l.Message, maxPartMessage))
		v.targets[l.Target] = &l
		v.order = append(v.order, l.Target)
		p.keys[rendezvous.Key(l.Provider, l.Target, perTarget)] = true
	}
}

// readLine reads one line of at most maxPartLine bytes, without its newline; io.EOF at the end.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("a line longer than %d bytes", maxPartLine)
	case errors.Is(err, io.EOF) && len(line) == 0:
		return nil, io.EOF
	case err != nil && !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	return bytes.TrimSuffix(line, []byte("\n")), nil
}

// verdict returns the part's verdict on provider's target (of type typ), if it has one.
func (p *part) verdict(provider string, typ checks.ProviderType, target string) *partLine {
	if p == nil {
		return nil
	}
	if v := p.providers[provider]; v != nil && v.typ == typ {
		return v.targets[target]
	}
	return nil
}

// state is l as the snapshot's TargetState (what the ProviderHealth writer reads), checked at
// checkedAt.
func (l *partLine) state(checkedAt time.Time) checks.TargetState {
	return checks.TargetState{
		TargetResult: checks.TargetResult{
			Target: l.Target, Up: l.Up, Reason: l.Reason, Message: l.Message, CheckedAt: checkedAt,
		},
		Since:                time.UnixMilli(l.Since),
		CheckReason:          l.Reason,
		ConsecutiveFailures:  l.Failures,
		ConsecutiveSuccesses: l.Successes,
	}
}

// carried is l as the runner's checks.Carried.
func (l *partLine) carried(checkedAt time.Time) checks.Carried {
	return checks.Carried{
		Up: l.Up, Reason: l.Reason, Message: l.Message,
		Since: time.UnixMilli(l.Since), CheckedAt: checkedAt,
		ConsecutiveFailures: l.Failures, ConsecutiveSuccesses: l.Successes,
	}
}
