package local

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial returns a plaintext gRPC connection to addr (host:port, or unix:///path), connected and ready within
// timeout, so that dialling is not part of a load generator's warm-up, let alone of its measurement.
func Dial(ctx context.Context, addr string, timeout time.Duration) (*grpc.ClientConn, error) {
	target := addr
	if !strings.HasPrefix(target, "unix:") {
		target = "passthrough:///" + target
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cc.Connect()
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return cc, nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			cc.Close()
			return nil, fmt.Errorf("connect %s: still %v after %v", addr, s, timeout)
		}
	}
}

// SleepUntil returns at t, or when ctx ends if that is sooner.
func SleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
