package exporter

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/exporter/status"
)

// labelledFleet: kvm-east (labels dc=east) with hv-a down (rack=r1), hv-b down (rack=r2) and
// hv-c ready (rack=r1, and its own dc=east-2 over its provider's); kvm-west (dc=west) with one
// ready host; gcp-prod without labels, down.
func labelledFleet() (*checks.Snapshot, time.Time) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(name string, up bool, r checks.Reason) checks.TargetState {
		return checks.TargetState{TargetResult: checks.TargetResult{Target: name, Up: up, Reason: r, Message: "m", CheckedAt: now.Add(-time.Second)}, Since: now.Add(-time.Hour)}
	}
	return &checks.Snapshot{Round: 3, RoundStarted: now.Add(-2 * time.Second), Providers: []checks.ProviderState{
		{Name: "kvm-east", Type: kvm.Type, Targets: []checks.TargetState{
			at("hv-a", false, kvm.ReasonTCPUnreachable), at("hv-b", false, kvm.ReasonSSHAuthFailed), at("hv-c", true, checks.ReasonReady)},
			Labels: checks.Labels{Provider: map[string]string{"dc": "east"}, Targets: map[string]map[string]string{
				"hv-a": {"rack": "r1"}, "hv-b": {"rack": "r2"}, "hv-c": {"rack": "r1", "dc": "east-2"}}}},
		{Name: "kvm-west", Type: kvm.Type, Targets: []checks.TargetState{at("hv-w", true, checks.ReasonReady)},
			Labels: checks.Labels{Provider: map[string]string{"dc": "west"}}},
		{Name: "gcp-prod", Type: gcp.Type, Targets: []checks.TargetState{at("my-project", false, checks.ReasonForbidden)}},
	}}, now
}

// TestStatusLabelFilter: ?label=name=value (repeatable, every one must hold) selects the
// targets whose labels (the provider's, with the target's own over them) hold it, on the
// status page and in the API alike; each target shows its labels; a bad selector is a 400.
func TestStatusLabelFilter(t *testing.T) {
	s, now := labelledFleet()
	e := landingExporter()
	apiTargets := func(query string) (names []string, labels map[string]map[string]any) {
		t.Helper()
		code, out, _ := statusJSON(t, e, query, s, now)
		if code != http.StatusOK {
			t.Fatalf("?%s: %d %v", query, code, out)
		}
		labels = map[string]map[string]any{}
		for _, p := range out["data"].(map[string]any)["providers"].([]any) {
			for _, tg := range p.(map[string]any)["targets"].([]any) {
				tm := tg.(map[string]any)
				names = append(names, tm["name"].(string))
				labels[tm["name"].(string)], _ = tm["labels"].(map[string]any)
			}
		}
		slices.Sort(names)
		return names, labels
	}
	page := func(query string) (int, string) {
		rec := httptest.NewRecorder()
		e.renderLanding(rec, httptest.NewRequest("GET", "/?"+query, nil), s, now)
		return rec.Code, rec.Body.String()
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"label=rack%3Dr1", []string{"hv-a", "hv-c"}},
		// hv-c's own dc=east-2 wins over its provider's dc=east.
		{"label=dc%3Deast", []string{"hv-a", "hv-b"}},
		{"label=dc%3Deast-2", []string{"hv-c"}},
		{"label=rack%3Dr1&label=dc%3Deast", []string{"hv-a"}},
		{"label=rack%3Dr1&state=down", []string{"hv-a"}},
		{"label=rack%3Dr1&state=up", []string{"hv-c"}},
		{"label=dc%3Dwest", []string{"hv-w"}},
		{"label=rack%3Dr1&reason=TCPUnreachable", []string{"hv-a"}},
		// An empty value matches no target: every label a target has holds a value.
		{"label=rack%3D", nil},
		// The form's empty label field selects nothing more.
		{"label=&label=rack%3Dr2", []string{"hv-b"}},
	} {
		got, _ := apiTargets(c.query)
		if !slices.Equal(got, c.want) {
			t.Errorf("API ?%s: %v, want %v", c.query, got, c.want)
		}
		code, body := page(c.query)
		if code != http.StatusOK {
			t.Fatalf("page ?%s: %d", c.query, code)
		}
		for _, n := range []string{"hv-a", "hv-b", "hv-c", "hv-w", "my-project"} {
			if listed := strings.Contains(body, ">"+n+"</a>"); listed != slices.Contains(c.want, n) {
				t.Errorf("page ?%s: %s listed %v, want %v", c.query, n, listed, !listed)
			}
		}
	}

	// Every target carries its labels, merged; one without any an empty object.
	_, labels := apiTargets("")
	if l := labels["hv-c"]; len(l) != 2 || l["dc"] != "east-2" || l["rack"] != "r1" {
		t.Errorf("hv-c's labels %v, want dc=east-2 and rack=r1", l)
	}
	if l := labels["my-project"]; l == nil || len(l) != 0 {
		t.Errorf("my-project's labels %v, want {}", l)
	}
	_, body := page("state=down")
	if !strings.Contains(body, `<span class="note labels">dc=east, rack=r1</span>`) {
		t.Errorf("the page does not show hv-a's labels, sorted:\n%s", body)
	}

	// The page says what the filter hides, and that nothing matches.
	_, body = page("label=rack%3Dr1")
	if !strings.Contains(body, "1 target of other reasons, labels or states not shown (filter: labels rack=r1).") {
		t.Errorf("?label=rack=r1: no note of kvm-east's hidden hv-b:\n%s", body)
	}
	if !strings.Contains(body, `<input type="hidden" name="label" value="rack=r1">`) {
		t.Errorf("?label=rack=r1: the form does not keep the label for the next filter:\n%s", body)
	}
	_, body = page("label=rack%3Dr9")
	if !strings.Contains(body, "No target has the labels rack=r9.") {
		t.Errorf("?label=rack=r9: no no-match note:\n%s", body)
	}

	// The pages' links keep the labels.
	f, err := status.ParseFilter(url.Values{"label": {"rack=r1", "dc=east", "rack=r1"}, "state": {"down"}})
	if err != nil {
		t.Fatal(err)
	}
	if u := f.URL(2); u != "?label=rack%3Dr1&label=dc%3Deast&page=2&state=down" {
		t.Errorf("page 2 of the filter: %s, want both labels once, the state and the page", u)
	}

	for q, want := range map[string]string{
		"label=rack":      `label "rack": want name=value`,
		"label=__x%3D1":   "reserved for Prometheus",
		"label=1rack%3D1": "invalid label name",
	} {
		code, out, _ := statusJSON(t, e, q, s, now)
		if code != http.StatusBadRequest || out["errorType"] != "bad_data" || !strings.Contains(out["error"].(string), want) {
			t.Errorf("API ?%s: %d %v, want 400 saying %q", q, code, out, want)
		}
		if code, body := page(q); code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("page ?%s: %d %q, want 400 saying %q", q, code, body, want)
		}
	}
}
