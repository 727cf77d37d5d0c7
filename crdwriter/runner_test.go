package crdwriter

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
	// The runner accepts only reasons of a registered type's catalogue.
	kvmcheck "github.com/provider-health-exporter/provider-health-exporter/checks/kvm"
)

// The check runner is the writer's Source.
var _ Source = (*checks.Runner)(nil)

// flipChecker is a checker whose one target is up or down as the test says.
type flipChecker struct{ down atomic.Bool }

func (c *flipChecker) Name() string              { return "kvm-lab" }
func (c *flipChecker) Type() checks.ProviderType { return kvmcheck.Type }
func (c *flipChecker) Targets() []string         { return []string{"hv1"} }
func (c *flipChecker) Check(context.Context) []checks.TargetResult {
	if c.down.Load() {
		return []checks.TargetResult{{Target: "hv1", Reason: kvmcheck.ReasonPoolInactive, Message: "pool default is inactive"}}
	}
	return []checks.TargetResult{{Target: "hv1", Up: true, Reason: checks.ReasonReady}}
}

// TestWriterWithRunner feeds the writer from the real check runner: the object follows the
// target, with one status write and one Event per flip however many rounds run.
func TestWriterWithRunner(t *testing.T) {
	c := &flipChecker{}
	runner := checks.NewRunner(checks.Options{Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond}, []checks.Checker{c})
	ctx, cancel := context.WithCancel(context.Background())
	runnerDone := make(chan struct{})
	go func() { defer close(runnerDone); runner.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runnerDone })

	objs := newFakeObjects()
	h := newHarness(t, nil, objs, nil, func(o *Options) { o.Source = runner; o.Interval = 50 * time.Millisecond; o.StaleAfter = time.Minute })
	h.start()
	eventually(t, "the object is Ready", func() bool {
		o := objs.get("kvm-lab")
		return o != nil && readyOf(o).Status == metav1.ConditionTrue
	})
	writes := objs.count("status")
	c.down.Store(true)
	eventually(t, "the object is not Ready", func() bool { return readyOf(objs.get("kvm-lab")).Reason == "PoolInactive" })
	round := runner.Current().Round
	eventually(t, "five more rounds", func() bool { return runner.Current().Round >= round+5 })
	if n := objs.count("status") - writes; n != 1 {
		t.Errorf("%d status writes for one flip over several rounds, want 1", n)
	}
	ev := drainEvents(h.rec)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning PoolInactive target hv1 is down (PoolInactive): pool default is inactive") {
		t.Errorf("events = %q", ev)
	}
}
