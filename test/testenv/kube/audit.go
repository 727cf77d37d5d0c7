package kube

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// auditPolicy records one event per request (when the response is complete). List requests
// also record the response, so a test can see how many objects a list returned; the API
// server's own requests are recorded without it, to keep the log small.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
    users: ["system:apiserver"]
  - level: RequestResponse
    verbs: ["list"]
  - level: Metadata
`

// barrierPrefix marks the requests AuditEvents makes to know the log is complete.
const barrierPrefix = "/api/v1/namespaces/audit-barrier-"

// AuditEvent is one request the API server recorded.
type AuditEvent struct {
	User       string
	Groups     []string
	UserAgent  string
	Verb       string // get, list, watch, create, update, patch, delete, ...
	RequestURI string // path and query, e.g. /api/v1/pods?labelSelector=a%3Db&limit=1
	APIGroup   string
	Resource   string
	Namespace  string
	Name       string
	Code       int // the response's HTTP status
	// ResponseKind is the kind of the recorded response (e.g. ConfigMapList, or
	// PartialObjectMetadataList when the client asked for metadata only); empty when the
	// response was not recorded.
	ResponseKind string
	// ResponseItems is how many items the response held: -1 when the response was not
	// recorded (only list responses are) or was not a list (an error Status).
	ResponseItems int
}

type rawAuditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		APIGroup  string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	ResponseObject *struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	} `json:"responseObject"`
}

// AuditEvents returns every request the API server has recorded so far. The log is written
// right after each response, so a request that just returned may not be in it yet: when the
// API server runs, this first makes a request of its own and waits for it to be recorded
// (those requests are left out of the result).
func (e *Env) AuditEvents(t testing.TB) []AuditEvent {
	t.Helper()
	e.mu.Lock()
	running := e.apiserver != nil && !e.apiserver.Exited()
	e.mu.Unlock()
	if running {
		uri := fmt.Sprintf("%s%s-%d", barrierPrefix, e.barrierID, e.barrierSeq.Add(1))
		req, _ := http.NewRequest(http.MethodGet, e.URL+uri, nil)
		req.Header.Set("Authorization", "Bearer "+e.adminToken)
		resp, err := e.httpClient(10 * time.Second).Do(req)
		if err != nil {
			t.Fatalf("kube: audit barrier request: %v", err)
		}
		resp.Body.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			events, seen, err := e.readAudit(uri)
			if err != nil {
				t.Fatalf("kube: %v", err)
			}
			if seen {
				return events
			}
			if time.Now().After(deadline) {
				t.Fatalf("kube: audit barrier %s not in %s after 10s", uri, e.auditPath)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	events, _, err := e.readAudit("")
	if err != nil {
		t.Fatalf("kube: %v", err)
	}
	return events
}

// CountRequests returns how many recorded requests match (see AuditEvents).
func (e *Env) CountRequests(t testing.TB, match func(AuditEvent) bool) int {
	t.Helper()
	n := 0
	for _, ev := range e.AuditEvents(t) {
		if match(ev) {
			n++
		}
	}
	return n
}

// readAudit parses the audit log, leaving barrier requests out, and reports whether the
// request for barrierURI was seen.
func (e *Env) readAudit(barrierURI string) (events []AuditEvent, seen bool, err error) {
	f, err := os.Open(e.auditPath)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var raw rawAuditEvent
			if jerr := json.Unmarshal(line, &raw); jerr != nil {
				return nil, false, fmt.Errorf("parse audit log line: %w", jerr)
			}
			if strings.HasPrefix(raw.RequestURI, barrierPrefix) {
				if raw.RequestURI == barrierURI {
					seen = true
				}
			} else if raw.Stage == "ResponseComplete" || raw.Stage == "Panic" {
				events = append(events, raw.event())
			}
		}
		if err != nil {
			// A partial last line is an event still being written: it is not counted.
			return events, seen, nil
		}
	}
}

func (raw *rawAuditEvent) event() AuditEvent {
	ev := AuditEvent{
		User:          raw.User.Username,
		Groups:        raw.User.Groups,
		UserAgent:     raw.UserAgent,
		Verb:          raw.Verb,
		RequestURI:    raw.RequestURI,
		ResponseItems: -1,
	}
	if raw.ObjectRef != nil {
		ev.APIGroup = raw.ObjectRef.APIGroup
		ev.Resource = raw.ObjectRef.Resource
		ev.Namespace = raw.ObjectRef.Namespace
		ev.Name = raw.ObjectRef.Name
	}
	if raw.ResponseStatus != nil {
		ev.Code = raw.ResponseStatus.Code
	}
	if raw.ResponseObject != nil {
		ev.ResponseKind = raw.ResponseObject.Kind
	}
	if raw.ResponseObject != nil && strings.HasSuffix(raw.ResponseObject.Kind, "List") {
		ev.ResponseItems = len(raw.ResponseObject.Items)
	}
	return ev
}
