package checks

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/internal/metricns"
)

// MetricNamespace prefixes every metric the exporter exports: the collector's, the writer's,
// the KVM pool's and every provider type's own gauges.
const MetricNamespace = metricns.Namespace

// Type is everything the exporter knows about one provider type. Each provider type is one
// package under checks/ that registers its Type from an init function; package providers
// imports the build's types in one place, and the exporter and the tests import it.
type Type struct {
	// Name is the providers file's `type` and the key of the type's block.
	Name ProviderType
	// Reasons is the closed catalogue of reasons the type's checks report, Ready and Timeout
	// included, each with its one-line meaning (the table of the package's reasons.md, which
	// make generate copies into docs/reasons.md, starts each row's meaning with it: a test
	// keeps them in step).
	Reasons []ReasonInfo
	// Block decodes and validates the type's providers-file block.
	Block config.BlockType
	// New builds the checker of one provider of the type; Register wraps it so that the
	// provider's secret files (config.File.Secret) join the set every message is redacted of
	// (WatchSecretFiles). It must not contact the provider:
	// connections are opened by the checks, so that --config.check can build every checker
	// without side effects. An error is a configuration the block's decoder could not see as
	// wrong.
	New func(config.Provider, *slog.Logger) (Checker, error)
	// Gauges are per-target gauge families of the type's own, beside the common ones; its
	// checks report their values in TargetResult.Samples.
	Gauges []*Gauge
	// PerTarget says the type's checks contact each target on its own (a kvm host over its
	// own SSH link), so that sharded replicas (--shard.enabled) split a provider's targets
	// between them; its checkers should implement SubsetChecker. False: one call checks every
	// target (an API), so one replica owns the provider whole (checks/shard.Key).
	PerTarget bool
}

// ReasonInfo is one reason of a type's catalogue and what it means.
type ReasonInfo struct {
	Reason  Reason
	Meaning string
}

// Gauge is a per-target gauge family of a provider type. Its series carry the labels provider
// and target, and Labels.
type Gauge struct {
	// Name is the family's whole name, MetricNamespace included.
	Name, Help string
	// Labels are the family's label names besides provider and target.
	Labels []string
}

// Sample is one value of a type's gauge for a target, with the values of the gauge's Labels.
type Sample struct {
	Gauge       *Gauge
	Value       float64
	LabelValues []string
}

var (
	registryMu sync.RWMutex
	registry   = map[ProviderType]*Type{}
)

// Register adds a provider type. It is called from the type package's init function, and
// panics on a duplicate or incomplete registration (a bug in the program).
func Register(t Type) {
	if t.New == nil || !slices.ContainsFunc(t.Reasons, func(r ReasonInfo) bool { return r.Reason == ReasonReady }) ||
		!slices.ContainsFunc(t.Reasons, func(r ReasonInfo) bool { return r.Reason == ReasonTimeout }) {
		panic(fmt.Sprintf("checks: provider type %q: a registration needs a constructor and a catalogue with Ready and Timeout", t.Name))
	}
	for _, g := range t.Gauges {
		if g.Name == "" || g.Help == "" {
			panic(fmt.Sprintf("checks: provider type %q: a gauge needs a name and help", t.Name))
		}
	}
	if !slices.ContainsFunc(t.Reasons, func(r ReasonInfo) bool { return r.Reason == ReasonMaintenance }) {
		// Every type's targets may be put in maintenance by the operator's label.
		t.Reasons = append(slices.Clip(t.Reasons), ReasonInfo{Reason: ReasonMaintenance, Meaning: MaintenanceMeaning})
	}
	// Every checker the type builds has its provider's secret files redacted from every
	// message of the process.
	build := t.New
	t.New = func(p config.Provider, logger *slog.Logger) (Checker, error) {
		if p.Block != nil {
			for _, f := range p.Block.Files() {
				if f.Secret {
					WatchSecretFiles(f.Path)
				}
			}
		}
		return build(p, logger)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[t.Name]; dup {
		panic(fmt.Sprintf("checks: provider type %q registered twice", t.Name))
	}
	config.RegisterType(string(t.Name), t.Block)
	registry[t.Name] = &t
}

// Lookup returns the registered type named name.
func Lookup(name ProviderType) (*Type, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	t, ok := registry[name]
	return t, ok
}

// Registered lists the registered types, sorted by name.
func Registered() []*Type {
	registryMu.RLock()
	defer registryMu.RUnlock()
	ts := make([]*Type, 0, len(registry))
	for _, t := range registry {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *Type) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return ts
}

// Reasons returns the closed catalogue of reasons a provider type may report (a copy); none
// for a type that is not registered.
func Reasons(t ProviderType) []Reason {
	typ, ok := Lookup(t)
	if !ok {
		return nil
	}
	rs := make([]Reason, len(typ.Reasons))
	for i, r := range typ.Reasons {
		rs[i] = r.Reason
	}
	return rs
}

// ValidReason reports whether r belongs to the catalogue of provider type t.
func ValidReason(t ProviderType, r Reason) bool {
	typ, ok := Lookup(t)
	return ok && slices.ContainsFunc(typ.Reasons, func(ri ReasonInfo) bool { return ri.Reason == r })
}

// Meaning is the one-line meaning of reason r of type t, "" when r is not in its catalogue.
func Meaning(t ProviderType, r Reason) string {
	if typ, ok := Lookup(t); ok {
		for _, ri := range typ.Reasons {
			if ri.Reason == r {
				return ri.Meaning
			}
		}
	}
	return ""
}
