package checks

import (
	"context"
	"errors"
	"sync"
)

// ErrCheckerClosed is the cause (context.Cause) of a check's context when its checker was
// closed during the check.
var ErrCheckerClosed = errors.New("the checker was closed during the check")

// Closing is what a checker's Close shares with its checks: closing it cuts every check in
// progress, as Closer's contract asks (Close does not wait for a check, and the check then
// returns promptly). The zero value is ready to use.
type Closing struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (c *Closing) init() {
	c.once.Do(func() { c.ctx, c.cancel = context.WithCancelCause(context.Background()) })
}

// Close cuts the checks in progress and every later one. It is idempotent.
func (c *Closing) Close() {
	c.init()
	c.cancel(ErrCheckerClosed)
}

// Done is closed by Close.
func (c *Closing) Done() <-chan struct{} {
	c.init()
	return c.ctx.Done()
}

// Scope returns ctx, cut by Close too (with the cause ErrCheckerClosed); the check calls stop
// when it ends.
func (c *Closing) Scope(ctx context.Context) (_ context.Context, stop func()) {
	c.init()
	ctx, cancel := context.WithCancelCause(ctx)
	unwatch := context.AfterFunc(c.ctx, func() { cancel(ErrCheckerClosed) })
	return ctx, func() { unwatch(); cancel(nil) }
}
