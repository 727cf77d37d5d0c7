package kube

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	authnv1 "k8s.io/api/authentication/v1"
)

// startWebhook serves the token-review webhook that authenticates users added with AddUser and
// the tokens of AcceptTokens' authorities.
// A token file would need an API server restart for every new identity; the webhook is asked
// on each unknown token (the API server caches answers for two minutes), so AddUser works at
// once. It listens on loopback only and returns its URL.
func (e *Env) startWebhook() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen for the token webhook: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(e.serveTokenReview)}
	e.mu.Lock()
	e.webhook = srv
	e.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String() + "/authenticate", nil
}

func (e *Env) serveTokenReview(w http.ResponseWriter, r *http.Request) {
	var review authnv1.TokenReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, "bad token review: "+err.Error(), http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	id, ok := e.byToken[review.Spec.Token]
	accept := e.accept
	e.mu.Unlock()
	for _, authority := range accept {
		if ok {
			break
		}
		var name string
		if name, ok = authority(review.Spec.Token); ok {
			id = identity{name: name}
		}
	}
	audiences := review.Spec.Audiences
	review.Spec = authnv1.TokenReviewSpec{} // never echo the token back
	review.Status = authnv1.TokenReviewStatus{Authenticated: ok}
	if ok {
		review.Status.User = authnv1.UserInfo{Username: id.name, UID: id.name, Groups: id.groups}
		// The API server asks for its own audiences; the test identities are valid for them.
		review.Status.Audiences = audiences
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}
