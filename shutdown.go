package main

// The exit: after SIGTERM or SIGINT, or when the HTTP server failed, every part stops in the
// order that keeps the targets checked and served the longest, within shutdownTimeout.

import (
	"context"
	"errors"
	"net/http"
	"time"
)

const (
	// shutdownTimeout bounds the whole exit after SIGTERM or SIGINT: the runner and the
	// ProviderHealth writer stopping, the checkers closing and in-flight HTTP requests
	// finishing. Whatever is still running then (a read of a file that does not return) is
	// left behind.
	shutdownTimeout = 10 * time.Second
	// shutdownReserve is the part of shutdownTimeout kept for the exit's last steps (deleting the
	// shard's Lease, in-flight HTTP requests) after the linger and the writer's release.
	shutdownReserve = 3 * time.Second
)

// shutDown stops everything within shutdownTimeout, whatever the API server does, and returns
// the exit code: code, or 1 when a part did not stop cleanly.
func (p *process) shutDown(code int) int {
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	code = max(code, p.leave(shutdownCtx))
	code = max(code, p.stopChecks(shutdownCtx))
	// The writer releases its Lease within its renew deadline; an API server that does not
	// answer is not waited for past the exit's last seconds: the Lease then expires.
	writerWait, cancelWriterWait := context.WithTimeout(shutdownCtx, max(time.Until(deadlineOf(shutdownCtx))-shutdownReserve, 0))
	select {
	case <-p.writerDone:
	case <-writerWait.Done():
		p.logger.Warn("the ProviderHealth writer did not release its Lease in time; it expires after its lease duration")
	}
	cancelWriterWait()
	// The others read this replica's part (its last verdicts, their counts) while it lingered.
	p.removeShard(shutdownCtx)
	code = max(code, p.stopServing(shutdownCtx))
	p.logger.Info("stopped")
	return code
}

// leave leaves the shard first (releases the Lease), so that the other replicas take over this
// one's targets at their next read of the members rather than at the Lease's expiry, and goes
// on serving them while the others check them (make before break; a second signal cuts it
// short). The writer's Lease is released at the same time, so that another replica writes the
// objects from its next retry rather than after this one's linger. It returns 1 when the HTTP
// server failed meanwhile.
func (p *process) leave(ctx context.Context) (code int) {
	p.stopWriter()
	p.releaseShard(ctx)
	if linger := shardLinger(p.opts.shard); p.serving && linger > 0 {
		p.logger.Info("left the shard; serving this replica's targets while the others take them over", "for", linger)
		select {
		case <-time.After(linger):
		case <-p.signals:
		case err := <-p.serveErr:
			p.serving = false
			p.logger.Error("http server failed", "err", err)
			return 1
		}
	}
	return 0
}

// stopChecks stops the checks and lets the runner return before the checkers close, so that no
// round starts a check on a closed checker. (A check abandoned at a deadline may still be on its
// way back; a checker's Close must tolerate that.) It returns 1 when they did not stop within ctx.
func (p *process) stopChecks(ctx context.Context) (code int) {
	p.e.Stopping()
	p.stopRunner()
	stopped := make(chan struct{})
	go func() {
		<-p.runnerDone
		p.e.Close()
		close(stopped)
	}()
	select {
	case <-stopped:
		return 0
	case <-ctx.Done():
		p.logger.Error("the checks did not stop in time; exiting without them", "timeout", shutdownTimeout)
		return 1
	}
}

// stopServing shuts the HTTP server down: in-flight requests get what is left of ctx, and a
// second at least. It returns 1 when the server failed.
func (p *process) stopServing(ctx context.Context) (code int) {
	if !p.serving {
		return 0
	}
	serverCtx, cancelServer := context.WithTimeout(context.Background(), max(time.Until(deadlineOf(ctx)), time.Second))
	defer cancelServer()
	if err := p.server.Shutdown(serverCtx); err != nil {
		p.logger.Error("http server shutdown", "err", err)
		code = 1
	}
	if err := <-p.serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.logger.Error("http server failed", "err", err)
		code = 1
	}
	return code
}

// deadlineOf is ctx's deadline (now when it has none).
func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now()
	}
	return d
}
