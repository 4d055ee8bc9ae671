package rlqs_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/clocktest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

type rlv3Entry = rlv3.RateLimitDescriptor_Entry

// t0 is the start of a minute, so tests know where windows end.
var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

const testRules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    value: trusted
  - key: user
    value: vip
    rate_limit: {unlimited: true}
  - key: tier
    value: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 600}
      - {unit: hour, requests_per_unit: 600}
  - key: open
    failure_mode: allow
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: closed
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: strict
    failure_mode: error
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// fixture is an RLQS server on a real gRPC server on a loopback port, with
// ShouldRateLimit's server for the rules and counter keys, on a clock the
// test moves: the streams' timers fire when it reaches them.
type fixture struct {
	rls    *envoyrls.Server
	srv    *rlqs.Server
	grpc   *grpc.Server
	store  window.Store
	obs    *countObserver
	conn   *grpc.ClientConn
	clock  *clocktest.Clock
	served chan error
	once   sync.Once
}

// stop drains the RLQS server and stops the gRPC server gracefully, once.
func (f *fixture) stop() {
	f.once.Do(func() {
		f.srv.Drain()
		f.grpc.GracefulStop()
		<-f.served
		f.srv.Wait()
	})
}

func (f *fixture) now() time.Time                    { return f.clock.Now() }
func (f *fixture) set(t time.Time)                   { f.clock.Set(t) }
func (f *fixture) advance(d time.Duration)           { f.clock.Advance(d) }
func (f *fixture) setRules(t *testing.T, src string) { f.rls.SetRules(mustRules(t, src)) }

func mustRules(t testing.TB, src string) *rules.Set {
	t.Helper()
	r, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(src)})
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	return r
}

func newFixture(t *testing.T, store window.Store, opts ...func(*rlqs.Options)) *fixture {
	t.Helper()
	f := &fixture{store: store, obs: newCountObserver(), served: make(chan error, 1), clock: clocktest.New(t0)}
	var err error
	f.rls, err = envoyrls.NewServer(envoyrls.Options{Store: store, Rules: mustRules(t, testRules), Now: f.now})
	if err != nil {
		t.Fatal(err)
	}
	o := rlqs.Options{Counters: f.rls, Store: store, Ledger: rlqs.NewMemory(rlqs.Policy{}), Now: f.now,
		TimerAt: func(at time.Time) rlqs.Timer { return f.clock.TimerAt(at) }, Logger: zaptest.NewLogger(t), Observer: f.obs}
	for _, fn := range opts {
		fn(&o)
	}
	if f.srv, err = rlqs.New(o); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.grpc = grpc.NewServer(grpc.ForceServerCodecV2(envoyrls.NewCodec()))
	rlqsv3.RegisterRateLimitQuotaServiceServer(f.grpc, f.srv)
	go func() { f.served <- f.grpc.Serve(lis) }()
	f.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.conn.Close()
		f.stop()
	})
	return f
}

// client is one Envoy's stream.
type client struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel context.CancelFunc
	msgs   chan *rlqsv3.RateLimitQuotaResponse
	err    chan error
}

func (f *fixture) open(t *testing.T) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(f.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &client{t: t, stream: s, cancel: cancel, msgs: make(chan *rlqsv3.RateLimitQuotaResponse, 16), err: make(chan error, 1)}
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				c.err <- err
				return
			}
			c.msgs <- m
		}
	}()
	t.Cleanup(cancel)
	return c
}

// use builds one usage: bucket as "k=v,k2=v2".
func use(bucket string, elapsed time.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	id := &rlqsv3.BucketId{Bucket: map[string]string{}}
	if bucket != "" {
		for _, kv := range strings.Split(bucket, ",") {
			k, v, _ := strings.Cut(kv, "=")
			id.Bucket[k] = v
		}
	}
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: id, TimeElapsed: durationpb.New(elapsed),
		NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

func (c *client) send(domain string, us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	c.t.Helper()
	// io.EOF: the server has ended the stream (a refused one, say); its
	// status is what end reads.
	if err := c.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil && !errors.Is(err, io.EOF) {
		c.t.Fatalf("send: %v", err)
	}
}

// recv returns the next response, failing after a while.
func (c *client) recv() *rlqsv3.RateLimitQuotaResponse {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case err := <-c.err:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		c.t.Fatal("no response")
	}
	return nil
}

// end returns the status the stream ended with.
func (c *client) end() codes.Code {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		c.t.Fatalf("got %v, want the stream's end", m)
	case err := <-c.err:
		return status.Code(err)
	case <-time.After(10 * time.Second):
		c.t.Fatal("the stream did not end")
	}
	return codes.OK
}

// quiet checks that nothing arrives for a moment.
func (c *client) quiet() {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		c.t.Fatalf("got %v, want nothing", m)
	case err := <-c.err:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

// report sends one report and returns the answer's actions by bucket.
func (c *client) report(us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction {
	c.t.Helper()
	c.send("edge", us...)
	return byBucket(c.recv())
}

func byBucket(m *rlqsv3.RateLimitQuotaResponse) map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction {
	out := map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction{}
	for _, a := range m.GetBucketAction() {
		var parts []string
		for k, v := range a.GetBucketId().GetBucket() {
			parts = append(parts, k+"="+v)
		}
		out[strings.Join(parts, ",")] = a
	}
	return out
}

// describe is an action in short: "allow", "deny", "abandon" or
// "tb:<max>/<per fill>/<interval s>", then "@<ttl s>".
func describe(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	if a == nil {
		return "none"
	}
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	q := a.GetQuotaAssignmentAction()
	s, ttl := q.GetRateLimitStrategy(), q.GetAssignmentTimeToLive().AsDuration().String()
	if tb := s.GetTokenBucket(); tb != nil {
		return "tb:" + itoa(uint64(tb.GetMaxTokens())) + "/" + itoa(uint64(tb.GetTokensPerFill().GetValue())) + "/" +
			tb.GetFillInterval().AsDuration().String() + "@" + ttl
	}
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return "deny@" + ttl
	}
	return "allow@" + ttl
}

func itoa(n uint64) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// used reads a counter of limit index i of the descriptor entries kv,
// without counting.
func (f *fixture) used(t *testing.T, i int, kv ...string) uint64 {
	t.Helper()
	var es []*rlv3Entry
	for j := 0; j+1 < len(kv); j += 2 {
		es = append(es, &rlv3Entry{Key: kv[j], Value: kv[j+1]})
	}
	l := f.rls.Rules().Domain("edge").Match(es)[i]
	c := f.rls.Counter("edge", es, l)
	c.Shadow = true
	res := make([]window.Result, 1)
	if _, err := f.store.Take(context.Background(), f.now(), []window.Counter{c}, res); err != nil {
		t.Fatalf("reading %v: %v", kv, err)
	}
	return c.Used(res[0], f.now())
}

// countObserver counts what a server observes.
type countObserver struct {
	mu      sync.Mutex
	allowed map[string]uint64 // by rule
	denied  map[string]uint64
	kinds   map[rlqs.Kind]int
	refused map[rlqs.Refusal]int
	streams int
	buckets int
}

func newCountObserver() *countObserver {
	return &countObserver{allowed: map[string]uint64{}, denied: map[string]uint64{}, kinds: map[rlqs.Kind]int{}, refused: map[rlqs.Refusal]int{}}
}

func (o *countObserver) Usage(_ string, l *rules.Limit, allowed, denied uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rule := ""
	if l != nil {
		rule = l.Rule
	}
	o.allowed[rule] += allowed
	o.denied[rule] += denied
}
func (o *countObserver) Assignment(_ string, k rlqs.Kind) { o.mu.Lock(); o.kinds[k]++; o.mu.Unlock() }
func (o *countObserver) Refused(r rlqs.Refusal)           { o.mu.Lock(); o.refused[r]++; o.mu.Unlock() }
func (o *countObserver) Streams(d int)                    { o.mu.Lock(); o.streams += d; o.mu.Unlock() }
func (o *countObserver) Buckets(d int)                    { o.mu.Lock(); o.buckets += d; o.mu.Unlock() }
func (o *countObserver) refusals(r rlqs.Refusal) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refused[r]
}
func (o *countObserver) gauges() (streams, buckets int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.streams, o.buckets
}
