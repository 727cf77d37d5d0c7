package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func members(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("provider-health-exporter-%d", i)
	}
	return ms
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = Key("kvm-lab", fmt.Sprintf("hv%05d.rack%02d.example.net", i, i%40), true)
	}
	return ks
}

// The weights (FNV-1a then fmix64, checked against an independent computation) are part of the contract between replicas of different versions during a rollout:
// a change of the hash would make old and new replicas disagree on every owner.
func TestWeightIsStable(t *testing.T) {
	for _, c := range []struct {
		member, key string
		want        uint64
	}{
		{"a", "k", 0xfc5cd934a73fec1c},
		{"provider-health-exporter-0", "kvm-lab/hv1", 0x815a120792e18a94},
	} {
		if got := Weight(c.member, c.key); got != c.want {
			t.Errorf("Weight(%q, %q) = %#x, want %#x", c.member, c.key, got, c.want)
		}
	}
	// The separator keeps ("ab", "c") and ("a", "bc") apart.
	if Weight("ab", "c") == Weight("a", "bc") {
		t.Error("Weight(ab, c) == Weight(a, bc): member and key are not separated")
	}
}

func TestKey(t *testing.T) {
	if got := Key("cluster-main", "https://api:6443", false); got != "cluster-main" {
		t.Errorf("whole provider: Key = %q, want the provider's name", got)
	}
	if got := Key("kvm-lab", "hv1", true); got != "kvm-lab/hv1" {
		t.Errorf("per-target provider: Key = %q, want kvm-lab/hv1", got)
	}
}

func TestOwnerEmpty(t *testing.T) {
	if got := Owner(nil, "k"); got != "" {
		t.Errorf("Owner(no members) = %q, want \"\"", got)
	}
	if got := Owner([]string{"only"}, "k"); got != "only" {
		t.Errorf("Owner(one member) = %q, want only", got)
	}
}

// Every member computes the same owner whatever order it lists the members in.
func TestOwnerIgnoresMemberOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 10, 50} {
		ms := members(n)
		for _, k := range keys(500) {
			want := Owner(ms, k)
			shuffled := slices.Clone(ms)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if got := Owner(shuffled, k); got != want {
				t.Fatalf("%d members: Owner(%q) = %q with the members shuffled, %q in order", n, k, got, want)
			}
			if !slices.Contains(ms, want) {
				t.Fatalf("Owner(%q) = %q, not a member", k, want)
			}
		}
	}
}

// Each member's share of 20,000 targets stays within 25% of the even share (the binomial
// spread at 50 members is about 7%: 25% is far outside chance, well inside a broken hash).
func TestOwnerSpread(t *testing.T) {
	ks := keys(20000)
	for _, n := range []int{3, 10, 50} {
		ms := members(n)
		count := map[string]int{}
		for _, k := range ks {
			count[Owner(ms, k)]++
		}
		even := float64(len(ks)) / float64(n)
		for _, m := range ms {
			if c := float64(count[m]); c < 0.75*even || c > 1.25*even {
				t.Errorf("%d members: %s owns %.0f targets, want within 25%% of %.0f", n, m, c, even)
			}
		}
	}
}

// A join moves only the targets the new member takes (about 1/(N+1)); a leave only the targets
// the leaving member owned.
func TestOwnerMovesTheMinimum(t *testing.T) {
	ks := keys(20000)
	for _, n := range []int{3, 10, 50} {
		ms := members(n)
		joined := append(slices.Clone(ms), "provider-health-exporter-new")
		moved := 0
		for _, k := range ks {
			before, after := Owner(ms, k), Owner(joined, k)
			if before == after {
				continue
			}
			moved++
			if after != "provider-health-exporter-new" {
				t.Fatalf("join of a member to %d: %q moved from %s to %s, not to the new member", n, k, before, after)
			}
		}
		minimum := float64(len(ks)) / float64(n+1)
		if f := float64(moved); f < 0.75*minimum || f > 1.25*minimum {
			t.Errorf("join of a member to %d: %d targets moved, want about %.0f (1/%d)", n, moved, minimum, n+1)
		}

		left := slices.Delete(slices.Clone(ms), 0, 1)
		moved = 0
		for _, k := range ks {
			before, after := Owner(ms, k), Owner(left, k)
			if before == after {
				continue
			}
			moved++
			if before != ms[0] {
				t.Fatalf("leave of %s from %d: %q moved from %s, which stayed", ms[0], n, k, before)
			}
		}
		minimum = float64(len(ks)) / float64(n)
		if f := float64(moved); f < 0.75*minimum || f > 1.25*minimum {
			t.Errorf("leave of a member from %d: %d targets moved, want about %.0f (1/%d)", n, moved, minimum, n)
		}
	}
}

func BenchmarkOwner(b *testing.B) {
	ms := members(10)
	ks := keys(5000)
	for b.Loop() {
		for _, k := range ks {
			Owner(ms, k)
		}
	}
}
