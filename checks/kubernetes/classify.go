package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// classify turns the error of the list request into a reason and a message. ctx is the
// check's context: once it is done, whatever the error says, the check ran out of time.
func classify(ctx context.Context, err error, what string) (checks.Reason, string) {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return checks.ReasonTimeout, fmt.Sprintf("list %s: no answer before the check's deadline: %v", what, err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		switch {
		case apierrors.IsUnauthorized(err):
			return checks.ReasonUnauthorized, fmt.Sprintf("list %s: the API server did not accept the credentials (%d): %v", what, code, err)
		case apierrors.IsForbidden(err):
			return checks.ReasonForbidden, fmt.Sprintf("list %s: the identity may not list it (%d): %v", what, code, err)
		case apierrors.IsNotFound(err):
			return checks.ReasonResourceNotFound, fmt.Sprintf("list %s: the API server does not serve this resource (%d): %v", what, code, err)
		default:
			return checks.ReasonAPIError, fmt.Sprintf("list %s: the API server answered %d: %v", what, code, err)
		}
	}
	// client-go runs exec credential plugins inside the transport; their failures say
	// "getting credentials" and are a matter of the kubeconfig, not of the server.
	if strings.Contains(err.Error(), "getting credentials") {
		return checks.ReasonConfigError, fmt.Sprintf("list %s: %v", what, err)
	}
	if unreachable(err) {
		return checks.ReasonAPIUnreachable, fmt.Sprintf("list %s: cannot reach the API server: %v", what, err)
	}
	return checks.ReasonAPIError, fmt.Sprintf("list %s: %v", what, err)
}

// unreachable reports whether err is a failure to reach the API server at all: a dial, a TLS
// handshake or certificate, a connection that broke before an answer.
func unreachable(err error) bool {
	var (
		opErr       *net.OpError
		dnsErr      *net.DNSError
		unknownCA   x509.UnknownAuthorityError
		hostnameErr x509.HostnameError
		invalidErr  x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		urlErr      *url.Error
	)
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.As(err, &unknownCA), errors.As(err, &hostnameErr), errors.As(err, &invalidErr),
		errors.As(err, &verifyErr), errors.As(err, &recordErr), errors.As(err, &alertErr):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &urlErr):
		// The transport failed before any answer came back.
		return true
	}
	return false
}
