// Command noop is a ratelimit.v3 server that does no work: every request is OVERALL OK with one OK status per
// descriptor. It is the ceiling of the benchmarks: what gRPC, protobuf and loopback cost on this machine before any
// rate limiting happens.
//
//	go run ./bench/noop -addr 127.0.0.1:8081
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/listen"
)

func main() {
	if os.Getenv("GOGC") == "" {
		// The same GC setting as the sidecar's main, so the ceiling is not
		// lowered by a collector the sidecar does not pay for.
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends. It prints "listening on ADDR" to stdout once the listener is open, ADDR being
// host:port or unix:///path, so a caller that asked for port 0 learns the port.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("noop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address: host:port or unix:///path")
	if err := fs.Parse(args); err != nil {
		return err
	}

	ln, shown, err := listenShown(*addr)
	if err != nil {
		return err
	}
	// The sidecar's gRPC tuning (reused stream goroutines), for the same
	// reason.
	srv := grpc.NewServer(grpc.NumStreamWorkers(64))
	rlsv3.RegisterRateLimitServiceServer(srv, server{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)

	fmt.Fprintf(stdout, "listening on %s\n", shown)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		hs.Shutdown()
		srv.GracefulStop()
		<-errc
		return nil
	}
}

// listenShown opens addr (see listen.Listen) and returns the address to show: the real port for host:0, the URL for
// a unix socket.
func listenShown(addr string) (net.Listener, string, error) {
	ln, err := listen.Listen(addr)
	if err != nil {
		return nil, "", err
	}
	if strings.HasPrefix(addr, "unix://") {
		return ln, addr, nil
	}
	return ln, ln.Addr().String(), nil
}

type server struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (server) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}
