package exporter

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/shard"
	"github.com/provider-health-exporter/provider-health-exporter/membership"
)

// A sharded replica's part is what it publishes in its shard Lease (membership.PartAnnotation):
// the verdicts of the targets it reports, with their consecutive counts. The writer's leader
// folds the members' parts into whole ProviderHealth objects (fleet.go), an old owner stops
// reporting a target once its new owner's part has it, and a new owner goes on from the
// counts the old one published (checks.Carried).
//
// Encoded as gzip-compressed JSON in base64, at most membership.MaxPart bytes: messages are
// clipped to maxPartMessage bytes, left out when the part would be larger, and the targets
// beyond what fits are left out last (counted in proxy_operator_shard_unpublished_targets).
const (
	partVersion    = 1
	maxPartMessage = 256
	// maxPartJSON bounds a part once decompressed: far above any part MaxPart can carry, so
	// that a hostile annotation cannot make a replica inflate more.
	maxPartJSON = 16 << 20
)

type partDoc struct {
	Version   int            `json:"v"`
	Providers []partProvider `json:"p"`
}

type partProvider struct {
	Name    string              `json:"n"`
	Type    checks.ProviderType `json:"y"`
	Targets []partTarget        `json:"t"`
}

// partTarget is one verdict; times in Unix milliseconds.
type partTarget struct {
	Target    string        `json:"t"`
	Up        bool          `json:"u,omitempty"`
	Reason    checks.Reason `json:"r"`
	Message   string        `json:"m,omitempty"`
	Since     int64         `json:"s"`
	CheckedAt int64         `json:"c"`
	Failures  int           `json:"f,omitempty"`
	Successes int           `json:"k,omitempty"`
}

// encodePart returns snap's verdicts as a part, and how many verdicts it had to leave out to
// stay within membership.MaxPart.
func encodePart(snap *checks.Snapshot) (string, int) {
	doc := partDoc{Version: partVersion}
	total := 0
	for _, p := range snap.Providers {
		pp := partProvider{Name: p.Name, Type: p.Type, Targets: make([]partTarget, 0, len(p.Targets))}
		for i := range p.Targets {
			t := &p.Targets[i]
			pp.Targets = append(pp.Targets, partTarget{
				Target: t.Target, Up: t.Up, Reason: t.Reason, Message: checks.Clip(t.Message, maxPartMessage),
				Since: t.Since.UnixMilli(), CheckedAt: t.CheckedAt.UnixMilli(),
				Failures: t.ConsecutiveFailures, Successes: t.ConsecutiveSuccesses,
			})
		}
		total += len(pp.Targets)
		doc.Providers = append(doc.Providers, pp)
	}
	s := encodeDoc(&doc)
	if len(s) <= membership.MaxPart {
		return s, 0
	}
	for i := range doc.Providers {
		for j := range doc.Providers[i].Targets {
			doc.Providers[i].Targets[j].Message = ""
		}
	}
	// Without messages; then fewer targets, halving what is left out until it fits.
	keep := total
	for {
		s = encodeDoc(limitTargets(&doc, keep))
		if len(s) <= membership.MaxPart || keep == 0 {
			return s, total - keep
		}
		keep = keep * 3 / 4
	}
}

// limitTargets returns doc with its first n targets only.
func limitTargets(doc *partDoc, n int) *partDoc {
	out := &partDoc{Version: doc.Version}
	for _, p := range doc.Providers {
		k := min(n, len(p.Targets))
		n -= k
		out.Providers = append(out.Providers, partProvider{Name: p.Name, Type: p.Type, Targets: p.Targets[:k]})
	}
	return out
}

func encodeDoc(doc *partDoc) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	// Encoding a struct of strings, numbers and booleans cannot fail, nor can writing to a
	// bytes.Buffer.
	_ = json.NewEncoder(zw).Encode(doc)
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// part is a decoded part: each provider's verdicts by target, and the ownership keys it
// reports.
type part struct {
	providers map[string]*partProviderView
	keys      map[string]bool
}

type partProviderView struct {
	typ     checks.ProviderType
	order   []string
	targets map[string]*partTarget
}

// decodePart decodes a part read from a Lease; an empty value is an empty part.
func decodePart(s string) (*part, error) {
	p := &part{providers: map[string]*partProviderView{}, keys: map[string]bool{}}
	if s == "" {
		return p, nil
	}
	if len(s) > membership.MaxPart {
		return nil, fmt.Errorf("%d bytes, more than %d", len(s), membership.MaxPart)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	js, err := io.ReadAll(io.LimitReader(zr, maxPartJSON+1))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	if len(js) > maxPartJSON {
		return nil, fmt.Errorf("more than %d bytes once decompressed", maxPartJSON)
	}
	var doc partDoc
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("not a part: %w", err)
	}
	if doc.Version != partVersion {
		return nil, fmt.Errorf("version %d, this replica reads version %d", doc.Version, partVersion)
	}
	for _, pp := range doc.Providers {
		if pp.Name == "" || p.providers[pp.Name] != nil {
			return nil, errors.New("a provider without a name, or listed twice")
		}
		v := &partProviderView{typ: pp.Type, targets: make(map[string]*partTarget, len(pp.Targets))}
		perTarget := checks.PerTarget(pp.Type)
		for i := range pp.Targets {
			t := &pp.Targets[i]
			if v.targets[t.Target] != nil {
				continue
			}
			v.targets[t.Target] = t
			v.order = append(v.order, t.Target)
			if perTarget {
				p.keys[shard.Key(pp.Name, t.Target, true)] = true
			}
		}
		if !perTarget && len(v.order) > 0 {
			p.keys[shard.Key(pp.Name, "", false)] = true
		}
		p.providers[pp.Name] = v
	}
	return p, nil
}

// verdict returns the part's verdict on provider's target (of type typ), if it has one.
func (p *part) verdict(provider string, typ checks.ProviderType, target string) *partTarget {
	if p == nil {
		return nil
	}
	if v := p.providers[provider]; v != nil && v.typ == typ {
		return v.targets[target]
	}
	return nil
}

// state is t as the snapshot's TargetState (what the ProviderHealth writer reads).
func (t *partTarget) state() checks.TargetState {
	return checks.TargetState{
		TargetResult: checks.TargetResult{
			Target: t.Target, Up: t.Up, Reason: t.Reason, Message: t.Message, CheckedAt: time.UnixMilli(t.CheckedAt),
		},
		Since:                time.UnixMilli(t.Since),
		CheckReason:          t.Reason,
		ConsecutiveFailures:  t.Failures,
		ConsecutiveSuccesses: t.Successes,
	}
}

// carried is t as the runner's checks.Carried.
func (t *partTarget) carried() checks.Carried {
	return checks.Carried{
		Up: t.Up, Reason: t.Reason, Message: t.Message,
		Since: time.UnixMilli(t.Since), CheckedAt: time.UnixMilli(t.CheckedAt),
		ConsecutiveFailures: t.Failures, ConsecutiveSuccesses: t.Successes,
	}
}
