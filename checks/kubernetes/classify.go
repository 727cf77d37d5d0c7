package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/provider-health-exporter/provider-health-exporter/checks"
)

// classify turns the error of the list request into a reason and a message. ctx is the
// check's context: once it is done, whatever the error says, the check ran out of time.
func classify(ctx context.Context, err error, what string) (checks.Reason, string) {
	if errors.Is(context.Cause(ctx), checks.ErrCheckerClosed) {
		return checks.ReasonTimeout, fmt.Sprintf("list %s: %v (the provider was removed or changed by a reload, or the exporter is stopping)", what, checks.ErrCheckerClosed)
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return checks.ReasonTimeout, fmt.Sprintf("list %s: no answer before the check's deadline: %v", what, err)
	}
	if reason, msg, ok := classifyGoogle(err, what); ok {
		return reason, msg
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
			return ReasonResourceNotFound, fmt.Sprintf("list %s: the API server does not serve this resource (%d): %v", what, code, err)
		default:
			return checks.ReasonAPIError, fmt.Sprintf("list %s: the API server answered %d: %v", what, code, err)
		}
	}
	// client-go runs exec credential plugins inside the transport; their failures say
	// "getting credentials" and are a matter of the kubeconfig, not of the server.
	if strings.Contains(err.Error(), "getting credentials") {
		return ReasonConfigError, fmt.Sprintf("list %s: %v", what, err)
	}
	if checks.Unreachable(err) {
		return checks.ReasonAPIUnreachable, fmt.Sprintf("list %s: cannot reach the API server: %v", what, err)
	}
	return checks.ReasonAPIError, fmt.Sprintf("list %s: %v", what, err)
}
