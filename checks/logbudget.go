package checks

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// MaxTransitionLinesPerRound bounds the transition lines one round logs (targets up, down,
// back, in maintenance; with debug, the checks a threshold holds back): a round that turns
// 100,000 targets down at once logs this many, then one line that counts the rest, so that a
// provider's outage neither floods the log pipeline nor holds the runner's lock for long.
const MaxTransitionLinesPerRound = 1000

// lineBudget is a slog.Handler that passes at most max records to next, and counts the rest:
// one per round (Runner.round).
type lineBudget struct {
	next    slog.Handler
	max     int64
	n       *atomic.Int64
	dropped *atomic.Int64
}

func newLineBudget(next slog.Handler, max int64) lineBudget {
	return lineBudget{next: next, max: max, n: new(atomic.Int64), dropped: new(atomic.Int64)}
}

func (b lineBudget) Enabled(ctx context.Context, l slog.Level) bool { return b.next.Enabled(ctx, l) }

func (b lineBudget) Handle(ctx context.Context, r slog.Record) error {
	if b.n.Add(1) > b.max {
		b.dropped.Add(1)
		return nil
	}
	return b.next.Handle(ctx, r)
}

func (b lineBudget) WithAttrs(as []slog.Attr) slog.Handler {
	b.next = b.next.WithAttrs(as)
	return b
}

func (b lineBudget) WithGroup(name string) slog.Handler {
	b.next = b.next.WithGroup(name)
	return b
}

// logDropped logs, when the budget dropped lines, the one line that counts them.
func (b lineBudget) logDropped(logger *slog.Logger) {
	if d := b.dropped.Load(); d > 0 {
		logger.Warn("more transitions this round than are logged: the rest are counted here (the status page and the metrics show every target)",
			"logged", b.max, "not_logged", d)
	}
}
