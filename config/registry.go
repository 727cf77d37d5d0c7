package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// The block types the loader knows, by type name. checks.Register adds each provider type's
// when its package is initialised.
var (
	registryMu sync.RWMutex
	registry   = map[string]BlockType{}
)

// RegisterType makes the loader accept providers of type name with the block bt. It panics
// when name is registered already or bt is incomplete: a registration is part of the program,
// made from an init function (through checks.Register).
func RegisterType(name string, bt BlockType) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("config: provider type %q registered twice", name))
	}
	if dnsLabel(name) != "" || bt.Decode == nil || len(bt.Fields) == 0 {
		panic(fmt.Sprintf("config: provider type %q: a registration needs a DNS-1123 label name, fields and a decoder", name))
	}
	registry[name] = bt
}

// TypeNames lists the registered provider types, sorted.
func TypeNames() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func lookup(name string) (BlockType, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	bt, ok := registry[name]
	return bt, ok
}

// YAMLKeys returns the keys of T's yaml struct tags, in field order: the keys a block of
// type T allows.
func YAMLKeys[T any]() []string {
	t := reflect.TypeFor[T]()
	keys := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}
