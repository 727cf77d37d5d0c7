package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
)

// Session runs the test environment's helpers, which are written against testing.TB, outside a
// test: in the demo launcher. Cleanups run, last registered first, in Close; temporary
// directories live under one directory that Close removes; a fatal error or a skip (a part that
// cannot run here) ends the function given to Run with that message as its error.
//
// Only the methods below are implemented; the embedded testing.TB is nil, so a helper calling
// any other would panic, which Run reports as an error rather than crashing with the
// environment half started.
type Session struct {
	testing.TB

	log    io.Writer
	ctx    context.Context
	cancel context.CancelFunc
	root   string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	errs     []string
	tempSeq  int
}

// abort is what Fatal and Skip panic with, to end the function given to Run.
type abort struct{ msg string }

// NewSession creates a session whose temporary directories go under a new directory in
// os.TempDir(), and whose log lines go to log.
func NewSession(log io.Writer) (*Session, error) {
	root, err := os.MkdirTemp("", "phe-demo-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{log: log, ctx: ctx, cancel: cancel, root: root}, nil
}

// Run calls fn and returns the error that ended it: a Fatal, a Skip, a panic, or the errors
// recorded by Error during fn.
func (s *Session) Run(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if a, ok := r.(abort); ok {
				err = errors.New(a.msg)
				return
			}
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	s.mu.Lock()
	s.errs = nil
	s.mu.Unlock()
	fn()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		return errors.New(s.errs[0])
	}
	return nil
}

// Close runs the cleanups, last registered first, then removes the temporary directories. It
// returns the errors the cleanups reported.
func (s *Session) Close() error {
	s.cancel()
	var errs []error
	for {
		s.mu.Lock()
		n := len(s.cleanups)
		if n == 0 {
			s.mu.Unlock()
			break
		}
		fn := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		s.errs = nil
		s.mu.Unlock()
		if err := s.Run(fn); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(s.root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Session) Helper()                           {}
func (s *Session) Name() string                      { return "demo" }
func (s *Session) Context() context.Context          { return s.ctx }
func (s *Session) Log(args ...any)                   { fmt.Fprintln(s.log, args...) }
func (s *Session) Logf(format string, args ...any)   { fmt.Fprintf(s.log, format+"\n", args...) }
func (s *Session) Error(args ...any)                 { s.record(fmt.Sprint(args...)) }
func (s *Session) Errorf(format string, args ...any) { s.record(fmt.Sprintf(format, args...)) }
func (s *Session) Fatal(args ...any) {
	s.record(fmt.Sprint(args...))
	panic(abort{fmt.Sprint(args...)})
}
func (s *Session) Fatalf(format string, args ...any) {
	s.Fatal(fmt.Sprintf(format, args...))
}
func (s *Session) Skip(args ...any)                 { s.Fatal(args...) }
func (s *Session) Skipf(format string, args ...any) { s.Fatalf(format, args...) }
func (s *Session) SkipNow()                         { s.Fatal("skipped") }
func (s *Session) FailNow()                         { s.Fatal("failed") }
func (s *Session) Fail()                            { s.record("failed") }
func (s *Session) Skipped() bool                    { return false }

func (s *Session) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *Session) record(msg string) {
	s.mu.Lock()
	s.failed = true
	s.errs = append(s.errs, msg)
	s.mu.Unlock()
}

func (s *Session) Cleanup(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, fn)
}

func (s *Session) TempDir() string {
	s.mu.Lock()
	s.tempSeq++
	n := s.tempSeq
	s.mu.Unlock()
	dir := fmt.Sprintf("%s/%03d", s.root, n)
	if err := os.Mkdir(dir, 0o700); err != nil {
		s.Fatalf("TempDir: %v", err)
	}
	return dir
}
