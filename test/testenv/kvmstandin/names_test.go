package kvmstandin

import "testing"

// TestVariedNamesUnique: a Varied fleet as large as the stand-in allows names every host
// differently.
func TestVariedNamesUnique(t *testing.T) {
	seen := map[string]int{}
	for i := range 250 * 250 {
		n := variedName(i)
		if j, ok := seen[n]; ok {
			t.Fatalf("hosts %d and %d are both named %s", j, i, n)
		}
		seen[n] = i
	}
}
