// Package shard is the pure part of sharding: which replica owns a target, given the members
// every replica sees. Ownership is rendezvous (highest random weight) hashing: each member
// weighs each key by a hash of the pair, and the heaviest member owns it. Every replica that
// sees the same members computes the same owner with no coordinator, the order of the members
// does not matter, and a change of members moves only the keys whose heaviest member joined or
// left: about 1/N of them.
//
// The package imports nothing of the project: the runner's ownership test, the shard (package
// shard, its fold and handover) and the tests all build on it.
package shard

import (
	"hash/fnv"
)

// Key is the ownership key of target of provider. A provider whose targets are checked one by
// one (perTarget: a kvm host per SSH link) is split per target: provider + "/" + target. A
// provider whose check is one call for all its targets (an API) is owned whole: its name alone.
// Provider names are DNS-1123 labels (no "/"), so two keys never collide.
func Key(provider, target string, perTarget bool) string {
	if !perTarget {
		return provider
	}
	return provider + "/" + target
}

// Owner returns the member that owns key: the one with the highest Weight, the smaller name
// on a tie (so the answer never depends on the members' order). "" when members is empty.
func Owner(members []string, key string) string {
	var best string
	var bestW uint64
	for i, m := range members {
		w := Weight(m, key)
		if i == 0 || w > bestW || w == bestW && m < best {
			best, bestW = m, w
		}
	}
	return best
}

// Weight is member's weight for key: FNV-1a over member, a zero byte and key, finished with
// the murmur3 64-bit mixer so that keys differing in their last bytes spread over the whole
// range. It is stable across processes, versions and architectures (every replica must agree).
func Weight(member, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return mix(h.Sum64())
}

// mix is murmur3's fmix64 finalizer.
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
