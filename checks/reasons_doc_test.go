package checks

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReasonsDocMatchesCatalogue keeps docs/reasons.md and the catalogue in step: the table under
// each provider type's heading lists exactly that type's reasons, once each.
func TestReasonsDocMatchesCatalogue(t *testing.T) {
	f, err := os.Open("../docs/reasons.md")
	if err != nil {
		t.Fatalf("open the reasons doc: %v", err)
	}
	defer f.Close()

	row := regexp.MustCompile("^\\| `([A-Za-z]+)` \\|")
	documented := map[ProviderType][]Reason{}
	var section ProviderType
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = ""
			if slices.Contains(Types, ProviderType(h)) {
				section = ProviderType(h)
				if _, dup := documented[section]; dup {
					t.Errorf("section %q appears twice", h)
				}
				documented[section] = []Reason{}
			}
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil {
			if section == "" {
				t.Errorf("reason row outside a provider type's section: %s", line)
				continue
			}
			documented[section] = append(documented[section], Reason(m[1]))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	for _, typ := range Types {
		got, ok := documented[typ]
		if !ok {
			t.Errorf("docs/reasons.md has no section %q", typ)
			continue
		}
		want := Reasons(typ)
		if len(want) == 0 {
			t.Errorf("the catalogue of %s is empty", typ)
		}
		for _, r := range got {
			if !ValidReason(typ, r) {
				t.Errorf("%s: docs/reasons.md lists %s, which is not in the catalogue", typ, r)
			}
		}
		for _, r := range want {
			if n := strings.Count(","+joinReasons(got)+",", ","+string(r)+","); n != 1 {
				t.Errorf("%s: %s is documented %d times, want once", typ, r, n)
			}
		}
	}
}

func joinReasons(rs []Reason) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ",")
}
