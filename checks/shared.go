package checks

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"time"
)

// FileState is what tells that a file changed since it was read (a rotated Secret): its
// modification time and size.
type FileState struct {
	ModTime time.Time
	Size    int64
}

// StatFile returns the state of the file at path.
func StatFile(path string) (FileState, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileState{}, err
	}
	return FileState{ModTime: fi.ModTime(), Size: fi.Size()}, nil
}

// Changed reports whether the file at path is no longer in state s. A file that cannot be
// stat'ed counts as changed, so that the next read reports why.
func (s FileState) Changed(path string) bool {
	now, err := StatFile(path)
	return err != nil || !now.ModTime.Equal(s.ModTime) || now.Size != s.Size
}

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
