package envoyrls

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// gateStore is a memory store whose Takes wait at a gate the test holds:
// each says on entered that it has started, then waits for a value on open
// (or for its caller to go away) before it counts.
type gateStore struct {
	*window.Memory
	entered chan struct{}
	open    chan struct{}
}

func (g *gateStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	select {
	case g.entered <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return g.Memory.Take(ctx, now, reqs, res)
}

// admissions is an Observer that counts admission events; every other
// event is ignored. The server's goroutines reach the test's only through
// sockets, which the race detector does not see, hence atomics.
type admissions struct {
	admitted, released, rejected atomic.Int64
}

func (a *admissions) Decision(Decision)              {}
func (a *admissions) StoreCall(time.Duration, error) {}
func (a *admissions) InvalidRequest()                {}
func (a *admissions) Admission(e Admission) {
	switch e {
	case AdmissionAdmitted:
		a.admitted.Add(1)
	case AdmissionReleased:
		a.released.Add(1)
	case AdmissionRejected:
		a.rejected.Add(1)
	}
}

// check reports counts other than admitted, released and rejected.
func (a *admissions) check(t *testing.T, when string, admitted, released, rejected int64) {
	t.Helper()
	got := [3]int64{a.admitted.Load(), a.released.Load(), a.rejected.Load()}
	if want := [3]int64{admitted, released, rejected}; got != want {
		t.Errorf("%s: admitted, released, rejected = %v, want %v", when, got, want)
	}
}

// TestMaxConcurrent: over a real gRPC connection, with MaxConcurrent n and
// n calls waiting in the store, one more call is refused at once with
// ResourceExhausted and the reference's message, without reaching the
// store (there it would wait at the gate); once a call is done its slot
// admits a new one. Without a cap the extra call is served. Every call has
// a deadline far beyond the test's needs, so a call over the cap that was
// queued instead of refused fails rather than hangs.
func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	const rules = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	tests := []struct {
		name     string
		max      int // Options.MaxConcurrent
		inFlight int // calls held in the store before the extra one
	}{
		{"cap 1", 1, 1},
		{"cap 3", 3, 3},
		{"no cap", 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &gateStore{Memory: window.NewMemory(), entered: make(chan struct{}), open: make(chan struct{})}
			rec := &admissions{}
			srv, err := NewServer(Options{Store: store, Rules: mustRules(t, rules), Observer: rec, MaxConcurrent: tt.max})
			if err != nil {
				t.Fatal(err)
			}
			client := rlsv3.NewRateLimitServiceClient(serveLoopback(t, srv, grpc.ForceServerCodecV2(NewCodec())))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			t.Cleanup(cancel)
			results := make(chan error, tt.inFlight+2) // every call's, so none is left blocked if the test fails
			call := func() {
				_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}})
				results <- err
			}
			// admitted waits until a call started with go call() is in the
			// store, or fails the test with the error it got instead.
			admitted := func(when string) {
				t.Helper()
				select {
				case <-store.entered:
				case err := <-results:
					t.Fatalf("%s: ShouldRateLimit = %v before reaching the store, want it admitted", when, err)
				}
			}
			// done lets one call out of the store and checks its answer.
			done := func(when string) {
				t.Helper()
				store.open <- struct{}{}
				if err := <-results; err != nil {
					t.Fatalf("%s: ShouldRateLimit = %v, want OK", when, err)
				}
			}

			for i := range tt.inFlight {
				go call()
				admitted("call " + strconv.Itoa(i+1))
			}
			held, rejected := int64(tt.inFlight), int64(0)
			if tt.max == 0 {
				// No cap: one more is served, and no admission is observed.
				go call()
				admitted("the extra call without a cap")
				rec.check(t, "no cap", 0, 0, 0)
				done("the extra call without a cap")
			} else {
				_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}})
				if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || st.Message() != overloadedMessage {
					t.Fatalf("call %d over the cap = %v, want ResourceExhausted %q", tt.inFlight+1, err, overloadedMessage)
				}
				rejected++
				rec.check(t, "with every slot held", held, 0, rejected)
				// A slot given back admits a call again.
				done("the first call")
				rec.check(t, "after one call", held, 1, rejected)
				go call()
				admitted("a call after a slot was freed")
				rec.check(t, "after a freed slot was taken", held+1, 1, rejected)
			}
			// tt.inFlight calls are in the store now.
			for i := range tt.inFlight {
				done("call " + strconv.Itoa(i+1) + " let out")
			}
			if tt.max == 0 {
				rec.check(t, "no cap, all done", 0, 0, 0)
				return
			}
			rec.check(t, "all done", held+1, held+1, rejected)
		})
	}
}

// TestMaxConcurrentNegative: a negative cap is refused, as the reference
// refuses to start with it.
func TestMaxConcurrentNegative(t *testing.T) {
	t.Parallel()
	if _, err := NewServer(Options{Store: window.NewMemory(), MaxConcurrent: -1}); err == nil {
		t.Error("NewServer(MaxConcurrent -1) = nil error, want one")
	}
}

// serveLoopback serves srv over gRPC on a loopback port, with opts, until
// the test ends, and returns a connection to it.
func serveLoopback(t *testing.T, srv *Server, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
