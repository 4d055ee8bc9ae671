package envoyrls

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

var (
	// ErrInvalidRequest wraps every reason a ShouldRateLimit request is
	// malformed. Nothing is counted for such a request.
	ErrInvalidRequest = errors.New("envoyrls: invalid request")
	// ErrUnavailable reports that the store failed for a limit whose failure
	// mode is "error", so Envoy's failure_mode_deny decides.
	ErrUnavailable = errors.New("envoyrls: store unavailable")
)

// grpcError maps an error of this package or of the store to a gRPC status.
// It is the one place where errors become codes.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	var code codes.Code
	switch {
	case errors.Is(err, ErrInvalidRequest):
		code = codes.InvalidArgument
	case errors.Is(err, ErrUnavailable), errors.Is(err, window.ErrStore):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	default:
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}
