package checks

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MaxAnswerSize bounds the body of every answer a monitored system gives a check (a Kubernetes
// LIST of at most one object, a Compute instances page of at most one instance, a vSphere
// retrieval of at most one object, an OAuth token): each is a few KiB, and one object's
// metadata is at most about 1.5 MiB (etcd's request limit). A longer body is cut there and the
// check reads APIError, so that a broken or hostile endpoint that never ends its answer costs at
// most this much memory per call, and the round's deadline bounds its time.
const MaxAnswerSize = 4 << 20

// ErrAnswerTooLarge is the error reading a body past MaxAnswerSize (LimitAnswers).
var ErrAnswerTooLarge = fmt.Errorf("the answer is larger than %d MiB: cut (a broken or hostile endpoint?)", MaxAnswerSize>>20)

// LimitAnswers wraps rt so that every response body it returns fails with ErrAnswerTooLarge
// once more than max bytes were read from it. The request's context still bounds its time.
func LimitAnswers(rt http.RoundTripper, max int64) http.RoundTripper {
	return limitAnswers{rt: rt, max: max}
}

type limitAnswers struct {
	rt  http.RoundTripper
	max int64
}

func (l limitAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: l.max}
	return resp, nil
}

// limitedBody reads at most left bytes of rc, then fails with ErrAnswerTooLarge.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, ErrAnswerTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// IsAnswerTooLarge reports whether err, or the text of an error a library flattened, is
// ErrAnswerTooLarge.
func IsAnswerTooLarge(err error) bool {
	return err != nil && (errors.Is(err, ErrAnswerTooLarge) || strings.Contains(err.Error(), ErrAnswerTooLarge.Error()))
}

// WrappedRoundTripper lets client-go's and net/http's helpers reach the transport underneath
// (utilnet.CloseIdleConnectionsFor).
func (l limitAnswers) WrappedRoundTripper() http.RoundTripper { return l.rt }
