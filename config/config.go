// Package config loads and validates the providers file (--config.file): which infrastructure
// providers the exporter checks and how to reach them. Validation is strict and complete: every
// problem of a file is reported at once, each placed at its file, line and column and naming the
// field and what is allowed. The loader fills in every default, so the Config it returns is the
// one the checks use as is. Secrets are referenced by path only; the loader never opens them.
package config

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/provider-health-exporter/provider-health-exporter/internal/fileread"
)

// The keys the file's own mappings allow: the yaml names of the fields of the type each decodes
// into, in declaration order. A type block's keys are its BlockType's.
var (
	rootFields     = YAMLKeys[Config]()
	providerFields = YAMLKeys[Provider]()
)

// Limits are the size ceilings of the files the loader reads.
type Limits struct {
	// MaxSize bounds the providers file (--config.max-size).
	MaxSize int64
	// TargetFileMaxSize bounds each target file (a kvm provider's hostFiles,
	// --config.host-file-max-size).
	TargetFileMaxSize int64
	// MaxTargets bounds the targets of one target file and of one provider's target files
	// together (--config.max-targets).
	MaxTargets int
}

// DefaultLimits are the flags' defaults: the providers file holds no host lists, so 1 MiB is
// ample; a host file may list thousands of hosts.
var DefaultLimits = Limits{MaxSize: 1 << 20, TargetFileMaxSize: 16 << 20, MaxTargets: 100_000}

// The flags that set Limits, named in the errors of a file larger than its limit.
const (
	FlagMaxSize           = "config.max-size"
	FlagTargetFileMaxSize = "config.host-file-max-size"
	FlagMaxTargets        = "config.max-targets"
)

// Load reads and validates the providers file at path. A file that does not validate returns
// Errors; a file that cannot be read returns the read error.
func Load(path string) (*Config, error) { return LoadFor(path, 0) }

// LoadFor is Load for an exporter whose rounds have the deadline roundTimeout: a kvm provider
// whose bounds add up to more than it is an error too (Fields.RoundTimeout). 0 skips that
// check (checks off).
func LoadFor(path string, roundTimeout time.Duration) (*Config, error) {
	return LoadWith(path, roundTimeout, DefaultLimits.MaxSize)
}

// LoadWith is LoadFor reading at most maxSize bytes: a larger file, or one that is not a
// regular file (a named pipe, a device), is refused before it is parsed (fileread).
func LoadWith(path string, roundTimeout time.Duration, maxSize int64) (*Config, error) {
	data, err := fileread.Read(path, maxSize)
	if err != nil {
		return nil, fmt.Errorf("reading providers file: %w", withFlag(err, FlagMaxSize))
	}
	return ParseFor(path, data, roundTimeout)
}

// withFlag names the flag that raises the limit in the error of a file too large.
func withFlag(err error, flag string) error {
	var tl *fileread.TooLargeError
	if errors.As(err, &tl) {
		return fmt.Errorf("%w (--%s)", err, flag)
	}
	return err
}

// Parse validates data as the providers file named filename (used in error messages; relative
// paths in the file are taken from filename's directory). On failure the error is Errors, every
// problem of the file sorted by position.
func Parse(filename string, data []byte) (*Config, error) { return ParseFor(filename, data, 0) }

// ParseFor is Parse with the round deadline of LoadFor.
func ParseFor(filename string, data []byte, roundTimeout time.Duration) (*Config, error) {
	base, err := filepath.Abs(filepath.Dir(filename))
	if err != nil {
		// Only when the working directory is gone; the paths stay relative to it.
		base = filepath.Dir(filename)
	}
	d := &decoder{file: filename, baseDir: base, roundTimeout: roundTimeout}
	cfg := d.parse(data)
	if err := d.result(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (d *decoder) parse(data []byte) (cfg *Config) {
	root := d.document(data)
	if root == nil {
		return nil
	}
	if !d.bounded(root, func() { cfg = d.config(root) }) {
		return nil
	}
	return cfg
}

// bounded runs walk over root with the alias budget: a walk that spends it is stopped and
// recorded as a problem of the file, and bounded reports false.
// A file decoded in parts (a target file, group by group) shares one alias budget between its
// parts: d.aliasSpent is what the parts before spent of it.
func (d *decoder) bounded(root *yaml.Node, walk func()) (ok bool) {
	own := 2 * countNodes(root)
	d.budget = own + aliasBudget - d.aliasSpent
	defer func() {
		if r := recover(); r != nil {
			if r != errBudget {
				panic(r)
			}
			d.add(root, "", "%v", errBudget)
			ok = false
		}
	}()
	walk()
	if left := d.budget; left < aliasBudget-d.aliasSpent {
		d.aliasSpent = aliasBudget - left
	}
	return true
}

func (d *decoder) config(root *yaml.Node) *Config {
	if r := d.resolve(root); r == nil || r.Kind != yaml.MappingNode {
		d.add(r, "", "the providers file must be a mapping with a providers key, got %s", describe(r))
		return nil
	}
	m, _ := d.mapping(root, nil, "", rootFields, false)
	cfg := &Config{Providers: []Provider{}}
	e, present := m.fields["providers"]
	if !present {
		d.add(m.where, "providers", "missing required field (a list of providers; providers: [] for none)")
		return nil
	}
	items, ok := d.sequence(e.value, "providers")
	if !ok {
		return nil
	}
	names := map[string]nameUse{}
	for i, item := range items {
		if p, ok := d.provider(item, index("providers", i), i, names); ok {
			cfg.Providers = append(cfg.Providers, p)
		}
	}
	return cfg
}

// thresholds reads a provider's failureThreshold and successThreshold (default 1 each).
func (d *decoder) thresholds(m *mapping) (failure, success int, ok bool) {
	errs := d.problems
	failure = d.intIn(m, "failureThreshold", DefaultFailureThreshold, 1, math.MaxInt32)
	success = d.intIn(m, "successThreshold", DefaultSuccessThreshold, 1, math.MaxInt32)
	return failure, success, d.problems == errs
}

// nameUse remembers where a provider name was first used.
type nameUse struct {
	index, line int
}

func (d *decoder) provider(n *yaml.Node, path string, i int, names map[string]nameUse) (Provider, bool) {
	var p Provider
	m, ok := d.mapping(n, nil, path, append(slices.Clip(providerFields), TypeNames()...), false)
	if !ok {
		return p, false
	}
	name, nv, nameOK := d.required(m, "name", "")
	first, dup := names[name]
	switch {
	case !nameOK:
		ok = false
	case dnsLabel(name) != "":
		d.add(nv, join(path, "name"), "invalid name %s: %s", quote(name), dnsLabel(name))
		ok = false
	case dup:
		d.add(nv, join(path, "name"), "duplicate provider name %s (first used by providers[%d] at line %d)",
			quote(name), first.index, first.line)
		ok = false
	default:
		names[name] = nameUse{index: i, line: nv.Line}
	}
	typeNames := TypeNames()
	allowed := " (allowed: " + strings.Join(typeNames, ", ") + ")"
	typ, tv, typeOK := d.required(m, "type", allowed)
	bt, known := lookup(typ)
	if typeOK && !known {
		d.add(tv, join(path, "type"), "unknown provider type %s%s", quote(typ), allowed)
		typeOK = false
	}
	p = Provider{Name: name, Type: typ}
	var thresholdsOK bool
	p.FailureThreshold, p.SuccessThreshold, thresholdsOK = d.thresholds(m)
	ok = ok && thresholdsOK
	var labelsOK bool
	p.Labels, labelsOK = d.labels(m)
	ok = ok && labelsOK
	if !typeOK {
		return p, false
	}
	for _, t := range typeNames {
		if e, has := m.fields[t]; has && t != typ {
			d.add(e.key, join(path, t), "block does not match type %s (a %s provider takes a %s block)",
				quote(typ), typ, typ)
			ok = false
		}
	}
	e, has := m.fields[typ]
	if !has {
		d.add(m.where, join(path, typ), "missing required field (a %s provider needs a %s block)", typ, typ)
		return p, false
	}
	bm, blockOK := d.mapping(e.value, e.key, join(path, typ), bt.Fields, true)
	if !blockOK {
		return p, false
	}
	errs := d.problems
	p.Block = bt.Decode(&Fields{d: d, m: bm})
	return p, ok && d.problems == errs && p.Block != nil
}

// dnsLabel checks a DNS-1123 label; the result is empty when s is one.
func dnsLabel(s string) string {
	const rule = "must be a DNS-1123 label: 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return rule
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return rule
		}
	}
	return ""
}

// labelProblem is dnsLabel's verdict as a message about a named value.
func labelProblem(what, s string) string {
	if p := dnsLabel(s); p != "" {
		return "invalid " + what + " " + quote(s) + ": " + p
	}
	return ""
}

// Warnings lists what the exporter should say loudly at every load: settings that weaken
// security and configurations that check nothing.
func (c *Config) Warnings() []string {
	var ws []string
	if len(c.Providers) == 0 {
		ws = append(ws, "no providers configured: the exporter runs no checks")
	}
	for _, p := range c.Providers {
		if p.Block != nil {
			ws = append(ws, p.Block.Warnings(p.Name)...)
		}
	}
	return ws
}

// Equal reports whether p and q are the same entry in every field, blocks included. A reload
// keeps the checker (and its connections and state) of a provider whose entry is Equal.
// Labels are left out (the provider's and a block's target labels): they change no checker, and
// a reload applies them to the running one.
func (p Provider) Equal(q Provider) bool {
	if p.Name != q.Name || p.Type != q.Type || p.FailureThreshold != q.FailureThreshold ||
		p.SuccessThreshold != q.SuccessThreshold || (p.Block == nil) != (q.Block == nil) {
		return false
	}
	return p.Block == nil || p.Block.Equal(q.Block)
}

// Files lists the local files every provider of the file names.
func (c *Config) Files() []ProviderFile {
	var fs []ProviderFile
	for _, p := range c.Providers {
		if p.Block == nil {
			continue
		}
		for _, f := range p.Block.Files() {
			if f.Path != "" {
				fs = append(fs, ProviderFile{Provider: p.Name, File: f})
			}
		}
	}
	return fs
}

// ProviderFile is a file a provider names.
type ProviderFile struct {
	Provider string
	File
}
