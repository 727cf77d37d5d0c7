package checks_test

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	// The provider types this module ships register themselves: the catalogues below are
	// theirs, and the package's own tests see them registered too.
	_ "github.com/provider-health-exporter/provider-health-exporter/providers"
)

// TestReasonsDocMatchesCatalogue keeps docs/reasons.md and the registered catalogues in step:
// the table under each provider type's heading (the section make generate copies from the
// reasons.md of the type's package) lists exactly that type's reasons, once each,
// and each row's meaning starts with the one-line meaning the type registered (its final
// period aside: the row may go on).
func TestReasonsDocMatchesCatalogue(t *testing.T) {
	f, err := os.Open("../docs/reasons.md")
	if err != nil {
		t.Fatalf("open the reasons doc: %v", err)
	}
	defer f.Close()

	row := regexp.MustCompile("^\\| `([A-Za-z]+)` \\| ([^|]*) \\|")
	type doc struct{ meanings map[checks.Reason]string }
	documented := map[checks.ProviderType]*doc{}
	var section *doc
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = nil
			if _, ok := checks.Lookup(checks.ProviderType(h)); ok {
				if _, dup := documented[checks.ProviderType(h)]; dup {
					t.Errorf("section %q appears twice", h)
				}
				section = &doc{meanings: map[checks.Reason]string{}}
				documented[checks.ProviderType(h)] = section
			}
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil {
			if section == nil {
				t.Errorf("reason row outside a provider type's section: %s", line)
				continue
			}
			if _, dup := section.meanings[checks.Reason(m[1])]; dup {
				t.Errorf("%s is documented twice in one section", m[1])
			}
			section.meanings[checks.Reason(m[1])] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	if len(checks.Registered()) < 3 {
		t.Fatalf("%d provider types registered, want every type this module ships", len(checks.Registered()))
	}
	for _, typ := range checks.Registered() {
		d, ok := documented[typ.Name]
		if !ok {
			t.Errorf("docs/reasons.md has no section %q: write reasons.md in the type's package and run `make generate` (docs/providers.md)", typ.Name)
			continue
		}
		for r := range d.meanings {
			if !checks.ValidReason(typ.Name, r) {
				t.Errorf("%s: docs/reasons.md lists %s, which is not in the catalogue", typ.Name, r)
			}
		}
		for _, ri := range typ.Reasons {
			got, ok := d.meanings[ri.Reason]
			switch {
			case !ok:
				t.Errorf("%s: %s is not documented", typ.Name, ri.Reason)
			case ri.Meaning == "" || strings.Contains(ri.Meaning, "\n"):
				t.Errorf("%s: %s: the registered meaning must be one line, got %q", typ.Name, ri.Reason, ri.Meaning)
			case !strings.HasPrefix(got, strings.TrimSuffix(ri.Meaning, ".")):
				t.Errorf("%s: %s: docs/reasons.md's meaning %q does not start with the registered one %q", typ.Name, ri.Reason, got, ri.Meaning)
			}
		}
	}
}
