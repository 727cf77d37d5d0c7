package exporter

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/crdwriter"
)

// statusJSON answers GET /api/v1/status?query for snapshot s, decoded generically.
func statusJSON(t *testing.T, e *Exporter, query string, s *checks.Snapshot, now time.Time) (int, map[string]any, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	e.renderStatusAPI(rec, httptest.NewRequest("GET", "/api/v1/status?"+query, nil), s, now)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("?%s: Content-Type %q, want application/json", query, ct)
	}
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("?%s: not JSON: %v\n%.500s", query, err, rec.Body.String())
	}
	return rec.Code, out, rec.Body.Len()
}

func keys(v any) string {
	m, _ := v.(map[string]any)
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}

// TestStatusAPIShape pins the field names of /api/v1/status: a client written against them keeps
// working. A field may be added; one removed or renamed needs a new version of the path.
func TestStatusAPIShape(t *testing.T) {
	f := newFleet()
	west := &f.snap.Providers[3]
	west.Unchecked = []checks.UncheckedTarget{{Target: "hv-west-new", Listed: f.now.Add(-time.Minute), Message: "not started: the round's deadline came"}}
	e := landingExporter()
	e.CRDReport = func() crdwriter.Report {
		return crdwriter.Report{Writing: true, SyncedRound: 41, Problems: []crdwriter.ObjectProblem{
			{Provider: "gcp-prod", Problem: crdwriter.ProblemFailing, Err: "forbidden", Since: f.now.Add(-time.Minute), Attempts: 2, RetryAt: f.now.Add(time.Second)}}}
	}
	e.inventory = newInventory(slog.New(slog.DiscardHandler), config.DefaultLimits)
	e.inventory.files[fileKey{"kvm-east", "/etc/inventory/east.json"}] = &targetFile{good: true, err: errors.New("permission denied"), errSince: f.now.Add(-time.Minute),
		groups: []config.TargetGroup{{Targets: []string{"hv-east-1"}}}}
	code, out, _ := statusJSON(t, e, "", f.snap, f.now)
	if code != http.StatusOK || out["status"] != "success" {
		t.Fatalf("%d %v", code, out["status"])
	}
	data := out["data"].(map[string]any)
	want := map[string]string{
		"hostFile":   "error,file,hostsKept,provider,since",
		"envelope":   "data,status",
		"data":       "checksEnabled,hostFileProblems,intervalSeconds,page,providers,round,summary,timeoutSeconds,version,writer",
		"round":      "durationSeconds,number,started",
		"summary":    "down,providers,ready,targets,unchecked",
		"page":       "number,pages,size,total",
		"provider":   "checked,down,lastChecked,maintenance,maintenanceTargets,name,ready,recentReadyRatio,since,targets,total,type,unchecked,uncheckedTargets,worstReason",
		"target":     "checkDurationSeconds,checkReason,consecutiveFailures,consecutiveSuccesses,history,labels,lastContacted,meaning,message,name,pending,reason,since,up",
		"transition": "at,first,fromReason,fromUp,message,reason,up",
		"unchecked":  "listed,message,name",
		"writer":     "problems,syncedRound,writing",
		"problem":    "attempts,error,problem,provider,retryAt,since",
	}
	providers := data["providers"].([]any)
	var east, westP map[string]any
	for _, p := range providers {
		switch pm := p.(map[string]any); pm["name"] {
		case "kvm-east":
			east = pm
		case "kvm-west":
			westP = pm
		}
	}
	var withHistory map[string]any
	for _, tg := range east["targets"].([]any) {
		if tm := tg.(map[string]any); tm["name"] == "hv-east-577" {
			withHistory = tm
		}
	}
	got := map[string]string{
		"envelope":   keys(out),
		"data":       keys(data),
		"round":      keys(data["round"]),
		"summary":    keys(data["summary"]),
		"page":       keys(data["page"]),
		"provider":   keys(east),
		"target":     keys(withHistory),
		"transition": keys(withHistory["history"].([]any)[0]),
		"unchecked":  keys(westP["uncheckedTargets"].([]any)[0]),
		"writer":     keys(data["writer"]),
		"problem":    keys(data["writer"].(map[string]any)["problems"].([]any)[0]),
		"hostFile":   keys(data["hostFileProblems"].([]any)[0]),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s fields %q, want %q", k, got[k], w)
		}
	}
	// The values are the page's.
	if s := data["summary"].(map[string]any); s["targets"] != 1000.0 || s["ready"] != 972.0 || s["down"] != 28.0 || s["unchecked"] != 1.0 || s["providers"] != 5.0 {
		t.Errorf("summary %v, want 5 providers, 1000 targets, 972 ready, 28 down, 1 unchecked", s)
	}
	if east["ready"] != 573.0 || east["down"] != 27.0 || east["worstReason"] != "TCPUnreachable" || east["since"] != "2026-11-30T09:00:00Z" {
		t.Errorf("kvm-east %v/%v ready, worst %v, since %v; want 573 ready, 27 down, TCPUnreachable, since 09:00", east["ready"], east["down"], east["worstReason"], east["since"])
	}
	h := withHistory["history"].([]any)
	if len(h) != 2 || h[0].(map[string]any)["first"] != true || h[1].(map[string]any)["reason"] != "TCPUnreachable" || h[1].(map[string]any)["message"] != "history-message-577" {
		t.Errorf("hv-east-577's history %v, want its first verdict then the TCPUnreachable transition, oldest first", h)
	}
	if withHistory["meaning"] != checks.Meaning(kvm.Type, kvm.ReasonTCPUnreachable) || withHistory["up"] != false {
		t.Errorf("hv-east-577: %v", withHistory)
	}
	// The page's order: providers with down targets first, each one's down targets before its
	// ready ones; page 1 holds 250 rows.
	var order []string
	rows := 0
	for _, p := range providers {
		pm := p.(map[string]any)
		order = append(order, pm["name"].(string))
		rows += len(pm["targets"].([]any))
	}
	if strings.Join(order, " ") != "kvm-east gcp-prod kvm-new cluster-main kvm-west" || rows != landingPageRows {
		t.Errorf("providers %v with %d rows, want the page's order and %d rows", order, rows, landingPageRows)
	}
	if kvmNew := providers[2].(map[string]any); kvmNew["checked"] != false || kvmNew["since"] != nil || kvmNew["lastChecked"] != nil {
		t.Errorf("kvm-new, never checked: %v", kvmNew)
	}
}

// TestStatusAPIFilters: the page's filters (provider, state, reason, page) select the same
// targets; a bad one answers 400 in the API's error shape.
func TestStatusAPIFilters(t *testing.T) {
	f := newFleet()
	e := landingExporter()
	names := func(out map[string]any) (all []string) {
		for _, p := range out["data"].(map[string]any)["providers"].([]any) {
			for _, tg := range p.(map[string]any)["targets"].([]any) {
				tm := tg.(map[string]any)
				all = append(all, fmt.Sprintf("%s:%v", tm["name"], tm["reason"]))
			}
		}
		return all
	}
	_, out, _ := statusJSON(t, e, "state=down", f.snap, f.now)
	if got := names(out); len(got) != len(f.down) {
		t.Errorf("state=down: %d targets, want the %d down", len(got), len(f.down))
	}
	_, out, _ = statusJSON(t, e, "reason=SSHAuthFailed", f.snap, f.now)
	got := names(out)
	if len(got) != 5 {
		t.Errorf("reason=SSHAuthFailed: %v, want the 5 hosts of that reason", got)
	}
	for _, n := range got {
		if !strings.HasSuffix(n, ":SSHAuthFailed") {
			t.Errorf("reason=SSHAuthFailed lists %s", n)
		}
	}
	if ps := out["data"].(map[string]any)["providers"].([]any); len(ps) != 1 {
		t.Errorf("reason=SSHAuthFailed: %d providers, want only kvm-east", len(ps))
	}
	_, out, _ = statusJSON(t, e, "provider=kvm-west&state=up&page=2", f.snap, f.now)
	if got := names(out); len(got) != 398-landingPageRows {
		t.Errorf("provider=kvm-west&state=up&page=2: %d targets, want %d", len(got), 398-landingPageRows)
	}
	if pg := out["data"].(map[string]any)["page"].(map[string]any); pg["number"] != 2.0 || pg["pages"] != 2.0 || pg["total"] != 398.0 {
		t.Errorf("page %v, want 2 of 2, 398 rows", pg)
	}
	for _, q := range []string{"state=sideways", "reason=Sideways", "page=0"} {
		code, out, _ := statusJSON(t, e, q, f.snap, f.now)
		if code != http.StatusBadRequest || out["status"] != "error" || out["errorType"] != "bad_data" || out["error"] == "" {
			t.Errorf("?%s: %d %v, want 400 with status error, errorType bad_data and the error", q, code, out)
		}
	}
}

// TestStatusAPIBounded: at 20,000 targets an answer holds one page of rows and stays small.
func TestStatusAPIBounded(t *testing.T) {
	s, now := bigFleet(20, 1000)
	e := landingExporter()
	_, out, size := statusJSON(t, e, "", s, now)
	rows := 0
	for _, p := range out["data"].(map[string]any)["providers"].([]any) {
		rows += len(p.(map[string]any)["targets"].([]any))
	}
	if rows != landingPageRows || size > 1<<20 {
		t.Errorf("20,000 targets: %d rows in %d bytes, want %d rows under 1 MB", rows, size, landingPageRows)
	}
	if pg := out["data"].(map[string]any)["page"].(map[string]any); pg["pages"] != float64(20000/landingPageRows) {
		t.Errorf("page %v, want %d pages", pg, 20000/landingPageRows)
	}
}
