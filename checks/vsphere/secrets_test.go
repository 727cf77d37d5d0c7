package vsphere_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	"github.com/provider-health-exporter/provider-health-exporter/checks/gcp"
	"github.com/provider-health-exporter/provider-health-exporter/checks/vsphere"
	"github.com/provider-health-exporter/provider-health-exporter/config"
	"github.com/provider-health-exporter/provider-health-exporter/test/testenv/vcsim"
	"github.com/provider-health-exporter/provider-health-exporter/test/testutil"
)

// TestUsernameFileHoldingASecret: a usernameFile pointed at a secret file, the provider's own
// passwordFile or another type's (a gcp provider's credentialsFile), logs in with the secret
// as the username; vCenter refuses it, and neither the verdict the runner publishes, nor a
// probe, nor the log shows the secret. The checkers are built by the registered constructors,
// as the exporter builds them, so each names its secret files.
func TestUsernameFileHoldingASecret(t *testing.T) {
	sim := start(t, vcsim.Options{})
	otherSecret := filepath.Join(t.TempDir(), "gcp-key")
	writeFile(t, otherSecret, "a-gcp-secret-0123456789\n")
	secrets = append(secrets, "a-gcp-secret-0123456789")

	build := func(typ checks.ProviderType, name string, block config.Block, logger *slog.Logger) checks.Checker {
		t.Helper()
		rt, ok := checks.Lookup(typ)
		if !ok {
			t.Fatalf("type %s is not registered", typ)
		}
		c, err := rt.New(config.Provider{Name: name, Type: string(typ), Block: block}, logger)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cl, ok := c.(interface{ Close() error }); ok {
				_ = cl.Close()
			}
		})
		return c
	}
	var logs testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Another type's provider names the other secret file; its own verdict does not matter.
	other := build(gcp.Type, "gcp", &gcp.Config{Project: "my-project", CredentialsFile: otherSecret, Endpoint: "https://127.0.0.1:9"}, logger)

	own := block(sim)
	own.UsernameFile = own.PasswordFile
	cross := block(sim)
	cross.UsernameFile = otherSecret
	vcOwn := build(vsphere.Type, "vc-own", own, logger)
	vcCross := build(vsphere.Type, "vc-cross", cross, logger)

	r := checks.NewRunner(checks.Options{Interval: time.Hour, Timeout: 30 * time.Second, Logger: logger},
		[]checks.Checker{other, vcOwn, vcCross})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	<-r.FirstRound()

	var seen []string
	for _, name := range []string{"vc-own", "vc-cross"} {
		var p *checks.ProviderState
		for i := range r.Current().Providers {
			if r.Current().Providers[i].Name == name {
				p = &r.Current().Providers[i]
			}
		}
		if p == nil || len(p.Targets) == 0 {
			t.Fatalf("provider %s has no verdict after the first round", name)
		}
		vc := p.Targets[0]
		if vc.Reason != checks.ReasonUnauthorized || !strings.Contains(vc.Message, `login of user "[redacted]" refused`) {
			t.Errorf("%s: %s (%q), want Unauthorized naming the user [redacted]", name, vc.Reason, vc.Message)
		}
		seen = append(seen, vc.Message)
	}
	trace := checks.NewTrace()
	pr, err := vcCross.(checks.TargetProber).ProbeTarget(context.Background(), vcCross.Targets()[0], trace)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	seen = append(seen, pr.Message, trace.String(), logs.String())
	if !strings.Contains(logs.String(), "vsphere check done") {
		t.Fatal("the debug log is empty: the test proves nothing")
	}
	for _, s := range []string{sim.Password(), "a-gcp-secret-0123456789"} {
		for _, text := range seen {
			if strings.Contains(text, s) {
				t.Errorf("a secret shows in %q", text)
			}
		}
	}
}
