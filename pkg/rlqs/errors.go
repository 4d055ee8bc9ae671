package rlqs

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

var (
	// ErrInvalidReport ends a stream whose report cannot be served at all:
	// the first without a domain, or one that changes the domain.
	// Malformed usages are refused one by one instead (see Refusal).
	ErrInvalidReport = errors.New("rlqs: invalid report")
	// ErrTooMany refuses a stream beyond Options.MaxStreams.
	ErrTooMany = errors.New("rlqs: too many streams")
	// ErrDraining ends the streams of a server that drains (Server.Drain).
	ErrDraining = errors.New("rlqs: server draining")
)

// grpcError maps an error of a stream to its gRPC status; it is the one
// place where this package's errors become codes. A status error (from
// the stream itself) keeps its code; the end of the client's side (io.EOF)
// ends the stream cleanly.
func grpcError(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var code codes.Code
	switch {
	case errors.Is(err, ErrInvalidReport):
		code = codes.InvalidArgument
	case errors.Is(err, ErrTooMany):
		code = codes.ResourceExhausted
	case errors.Is(err, ErrDraining), errors.Is(err, window.ErrStore):
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
