package faults

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Kind is how a call was answered.
type Kind int

// The kinds of answer, in the order the tables list them.
const (
	OK          Kind = iota // a decision: allowed
	OverLimit               // a decision: denied
	Unavailable             // gRPC Unavailable: the server's failure mode (error) answered
	Deadline                // the client's deadline passed first, sent or not
	OtherError              // any other gRPC error (the reference's recovered panics are Unknown)
	kinds
)

var kindNames = [kinds]string{"OK", "OVER_LIMIT", "Unavailable", "deadline", "other error"}

func (k Kind) String() string { return kindNames[k] }

// Decided reports whether the server decided the call from its counters.
func (k Kind) Decided() bool { return k == OK || k == OverLimit }

// Call is one call of a load run. At is when it was due (from the start of
// the run), not when it was sent: a call that waits for a free slot behind
// calls that hang is late by that wait, so Latency counts from when it was
// due (no coordinated omission).
type Call struct {
	At      time.Duration
	Latency time.Duration
	Kind    Kind
	Hot     bool // on the key driven over its limit
}

// Load is an open-loop load: Rate calls per second, due at even intervals,
// sent by at most InFlight callers at once, each with Deadline from when it
// was due. Every HotEvery-th call is on HotValue of descriptor key hot (the
// key driven over its limit); the others spread over Keys values of
// api_key, far under their limit.
type Load struct {
	Rate     float64
	InFlight int
	Deadline time.Duration
	Domain   string
	Keys     int
	HotEvery int
	HotValue string
}

// Run sends the load on conn from start until ctx ends or for d, and
// returns every call, ordered by when it was due. A call still due when the
// run ends is not sent.
func (l Load) Run(ctx context.Context, conn grpc.ClientConnInterface, start time.Time, d time.Duration) []Call {
	client := rlsv3.NewRateLimitServiceClient(conn)
	n := int(l.Rate * d.Seconds())
	calls := make([]Call, n)
	due := make(chan int, n)
	var wg sync.WaitGroup
	for range max(l.InFlight, 1) {
		wg.Go(func() {
			for i := range due {
				calls[i] = l.call(ctx, client, start, i)
			}
		})
	}
	interval := time.Duration(float64(time.Second) / l.Rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	sent := n
	for i := range n {
		at := time.Duration(i) * interval
		timer.Reset(time.Until(start.Add(at)))
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			sent = i
			break
		}
		calls[i].At = at
		due <- i
	}
	close(due)
	wg.Wait()
	return calls[:sent]
}

func (l Load) call(ctx context.Context, client rlsv3.RateLimitServiceClient, start time.Time, i int) Call {
	at := time.Duration(i) * time.Duration(float64(time.Second)/l.Rate)
	c := Call{At: at, Hot: l.HotEvery > 0 && i%l.HotEvery == 0}
	dueAt := start.Add(at)
	ctx, cancel := context.WithDeadline(ctx, dueAt.Add(l.Deadline))
	defer cancel()
	entry := &commonv3.RateLimitDescriptor_Entry{Key: "api_key", Value: "k" + strconv.Itoa(i%max(l.Keys, 1))}
	if c.Hot {
		entry = &commonv3.RateLimitDescriptor_Entry{Key: "hot", Value: l.HotValue}
	}
	req := &rlsv3.RateLimitRequest{Domain: l.Domain, HitsAddend: 1,
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{entry}}}}
	var resp *rlsv3.RateLimitResponse
	err := ctx.Err() // waited a second behind hung calls: not sent
	if err == nil {
		resp, err = client.ShouldRateLimit(ctx, req)
	}
	c.Latency = time.Since(dueAt)
	c.Kind = classify(resp, err)
	return c
}

// classify names the answer of one call.
func classify(resp *rlsv3.RateLimitResponse, err error) Kind {
	switch {
	case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		return OK
	case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		return OverLimit
	case err == nil:
		return OtherError
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return Deadline
	case status.Code(err) == codes.Unavailable:
		return Unavailable
	}
	return OtherError
}

// Capacity is how many calls per second the server on conn answers with
// inFlight calls always in flight (closed loop), over d.
func Capacity(ctx context.Context, conn grpc.ClientConnInterface, l Load, inFlight int, d time.Duration) float64 {
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for w := range inFlight {
		wg.Go(func() {
			n := 0
			for i := w; ctx.Err() == nil; i += inFlight {
				req := &rlsv3.RateLimitRequest{Domain: l.Domain, HitsAddend: 1, Descriptors: []*commonv3.RateLimitDescriptor{{
					Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k" + strconv.Itoa(i%max(l.Keys, 1))}}}}}
				if _, err := client.ShouldRateLimit(ctx, req); err == nil {
					n++
				}
			}
			mu.Lock()
			done += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(done) / d.Seconds()
}
