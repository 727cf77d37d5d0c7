package vcsim

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"
)

func login(t *testing.T, s *Sim, user, pass string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	sc := soap.NewClient(u, false)
	if err := sc.SetRootCAs(s.CAFile()); err != nil {
		t.Fatal(err)
	}
	c, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return err
	}
	return session.NewManager(c).Login(ctx, url.UserPassword(user, pass))
}

// The simulator verifies on its own CA, accepts only its credentials, counts sessions without
// counting the asking, drops them, and restarts on the same port.
func TestStart(t *testing.T) {
	s := Start(t, Options{})
	if n := len(s.Sessions()); n != 0 {
		t.Fatalf("a fresh simulator lists %d sessions, want 0 (the admin endpoint must not open one)", n)
	}
	if err := login(t, s, s.Username(), s.Password()); err != nil {
		t.Fatalf("login with the simulator's credentials: %v", err)
	}
	if err := login(t, s, s.Username(), "wrong"); err == nil {
		t.Fatal("a wrong password logged in")
	}
	got := s.Sessions()
	if len(got) != 1 || got[0].UserName != s.Username() || got[0].CallCount < 1 {
		t.Fatalf("sessions after one login = %+v, want one of %s with a call counted", got, s.Username())
	}
	if n := s.DropSessions(); n != 1 {
		t.Fatalf("DropSessions = %d, want 1", n)
	}
	if n := len(s.Sessions()); n != 0 {
		t.Fatalf("%d sessions after DropSessions", n)
	}
	before := s.URL()
	s.Restart()
	if s.URL() != before {
		t.Fatalf("restart moved the simulator from %s to %s", before, s.URL())
	}
	if err := login(t, s, s.Username(), s.Password()); err != nil {
		t.Fatalf("login after restart: %v", err)
	}
}
