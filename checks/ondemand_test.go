package checks

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestTrace: stages in the order they began, each ended once, a stage still running reported
// as such.
func TestTrace(t *testing.T) {
	tr := NewTrace()
	endA := tr.Begin("tcp connect")
	endA("ok: connected")
	endA("a second end is ignored")
	tr.Begin("libvirt ConnectGetLibVersion") // never ends: a hung call
	st := tr.Stages()
	if len(st) != 2 || st[0].Name != "tcp connect" || st[0].Result != "ok: connected" || st[0].Running ||
		st[1].Name != "libvirt ConnectGetLibVersion" || !st[1].Running {
		t.Fatalf("stages %+v", st)
	}
	s := tr.String()
	if !strings.Contains(s, "tcp connect") || !strings.Contains(s, "NO RESULT: still running after") {
		t.Errorf("rendered trace:\n%s", s)
	}
}

// TestNilTraceCostsNothing: the rounds pass a nil trace; beginning and ending a stage on it
// allocates nothing.
func TestNilTraceCostsNothing(t *testing.T) {
	var tr *Trace
	if n := testing.AllocsPerRun(100, func() { tr.Begin("stage")("ok") }); n != 0 {
		t.Errorf("a stage on a nil trace allocates %v times, want 0", n)
	}
	if tr.Stages() != nil || tr.String() != "" {
		t.Error("a nil trace reports stages")
	}
}

type single struct{ target string }

func (s single) Name() string       { return "p" }
func (s single) Type() ProviderType { return typeGCP }
func (s single) Targets() []string  { return []string{s.target} }
func (s single) Check(context.Context) []TargetResult {
	return []TargetResult{{Target: s.target, Reason: ReasonForbidden, Message: "denied"}}
}

// TestProbeSingle: the one target's verdict, one stage, and ErrUnknownTarget for another.
func TestProbeSingle(t *testing.T) {
	tr := NewTrace()
	r, err := ProbeSingle(context.Background(), single{"proj"}, "proj", tr, "list")
	if err != nil || r.Reason != ReasonForbidden || r.Up {
		t.Errorf("got %+v %v", r, err)
	}
	if st := tr.Stages(); len(st) != 1 || st[0].Name != "list" || st[0].Result != "Forbidden: denied" {
		t.Errorf("stages %+v", st)
	}
	if _, err := ProbeSingle(context.Background(), single{"proj"}, "other", nil, "list"); !errors.Is(err, ErrUnknownTarget) {
		t.Errorf("another target: %v, want ErrUnknownTarget", err)
	}
}
