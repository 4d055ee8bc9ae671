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
	// ErrOverloaded reports a ShouldRateLimit call refused because
	// Options.MaxConcurrent calls were in progress. Nothing is counted for
	// it.
	ErrOverloaded = errors.New("envoyrls: " + overloadedMessage)
)

// overloadedMessage is envoyproxy/ratelimit's status message for a call
// over MAX_CONCURRENT_REQUESTS; ErrOverloaded's status carries it as it is,
// so what matches the reference's message matches the sidecar's.
const overloadedMessage = "maximum concurrent rate limit requests reached"

// grpcError maps an error of this package or of the store to a gRPC status.
// It is the one place where errors become codes.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	var code codes.Code
	switch {
	case errors.Is(err, ErrOverloaded):
		return status.Error(codes.ResourceExhausted, overloadedMessage)
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
