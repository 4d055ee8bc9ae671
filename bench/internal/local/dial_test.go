package local

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// TestDial: a connection to a serving gRPC server comes back ready; one to a port nobody listens on fails
// within the timeout.
func TestDial(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := Dial(context.Background(), lis.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Errorf("state %v, want READY", s)
	}
	cc.Close()

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	start := time.Now()
	if cc, err := Dial(context.Background(), addr, 300*time.Millisecond); err == nil {
		cc.Close()
		t.Errorf("Dial(%s) of a closed port: no error", addr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Dial of a closed port took %v, timeout 300ms", d)
	}
}
