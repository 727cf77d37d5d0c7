package promstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Notification is the body Alertmanager's webhook receiver posts (payload version 4).
type Notification struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"` // "firing" or "resolved"
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []NotifiedAlert   `json:"alerts"`
}

// NotifiedAlert is one alert in a Notification.
type NotifiedAlert struct {
	Status       string            `json:"status"` // "firing" or "resolved"
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// Alert returns the notified alert named alertname with the given status ("firing" or
// "resolved"), if the notification holds one.
func (n Notification) Alert(alertname, status string) (NotifiedAlert, bool) {
	for _, a := range n.Alerts {
		if a.Labels["alertname"] == alertname && a.Status == status {
			return a, true
		}
	}
	return NotifiedAlert{}, false
}

// receive is the webhook receiver's handler: it records every notification.
func (s *Stack) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var n Notification
	if err == nil {
		err = json.Unmarshal(body, &n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// Kept for the failure dump: a test waiting for a notification then says why none came.
		s.webhookErrs = append(s.webhookErrs, fmt.Errorf("undecodable notification %q: %w", truncate(body), err))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.notifications = append(s.notifications, n)
}

// Notifications returns every notification the webhook receiver got so far, oldest first.
func (s *Stack) Notifications() []Notification {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Notification, len(s.notifications))
	copy(out, s.notifications)
	return out
}

// WaitForNotification waits until the webhook receiver has got a notification that cond
// accepts, and returns the first such one.
func (s *Stack) WaitForNotification(tb testing.TB, cond func(Notification) bool, timeout time.Duration) Notification {
	tb.Helper()
	var found Notification
	ok := poll(timeout, func(context.Context) bool {
		for _, n := range s.Notifications() {
			if cond(n) {
				found = n
				return true
			}
		}
		return false
	})
	if !ok {
		tb.Fatalf("no matching notification within %v; got %d: %+v", timeout, len(s.Notifications()), s.Notifications())
	}
	return found
}
