package checks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"

	"github.com/provider-health-exporter/provider-health-exporter/internal/filestate"
)

// FileState identifies one version of a file (filestate.State), so that a file read once is
// read again exactly when it changed: a Kubernetes Secret rotated in place swaps a symlink (a new
// inode), an editor rewrites the file (a new modification time or size). Every provider type
// that reads a file (a key, a kubeconfig, a CA bundle, a password) notices a change with it, at
// its next check. The zero value is "never read" (or no file). FileStates compare with ==.
type FileState = filestate.State

// StatFile returns the state of the file at path, following symlinks (as a Secret mount
// needs). An empty path has the zero state.
func StatFile(path string) (FileState, error) { return filestate.Stat(path) }

// Unreachable reports whether err (from an HTTP client) is a failure to get any answer from
// an API endpoint: name resolution, TCP connect, TLS handshake or certificate verification,
// a connection closed or reset before an answer. The API-backed checks report it as
// APIUnreachable.
func Unreachable(err error) bool {
	var (
		dnsErr      *net.DNSError
		opErr       *net.OpError
		verifyErr   *tls.CertificateVerificationError
		unknownCA   x509.UnknownAuthorityError
		hostnameErr x509.HostnameError
		invalidErr  x509.CertificateInvalidError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		urlErr      *url.Error
	)
	switch {
	case errors.As(err, &dnsErr), errors.As(err, &opErr),
		errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostnameErr),
		errors.As(err, &invalidErr), errors.As(err, &recordErr), errors.As(err, &alertErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return true
	}
	// Whatever else http.Client.Do failed with (it wraps every failure of the transport in a
	// *url.Error) came before any answer: net/http's own errors for a connection closed before
	// the response ("server closed idle connection") or a handshake that timed out are
	// unexported.
	return errors.As(err, &urlErr)
}

// ErrorDetail describes a transport failure by its innermost network error (the operation and
// address, or the name lookup), without the request URL: for the messages of API-backed checks.
func ErrorDetail(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Error()
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err.Error()
	}
	return err.Error()
}

// Await waits for the result of a call running in its own goroutine until ctx ends. ok is
// false when the deadline came first; a result and the deadline arriving together keep the
// result. done should be buffered, so that an abandoned call does not block on sending.
func Await[T any](ctx context.Context, done <-chan T) (v T, ok bool) {
	select {
	case v = <-done:
		return v, true
	case <-ctx.Done():
		select {
		case v = <-done:
			return v, true
		default:
			return v, false
		}
	}
}
