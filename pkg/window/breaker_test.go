package window_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// fakeStore answers Take with err (nil: allowed) and counts calls. If block
// is set, Take says so on entered (when set) and waits on block first.
type fakeStore struct {
	mu      sync.Mutex
	err     error
	block   chan struct{}
	entered chan struct{}
	calls   atomic.Int64
}

func (f *fakeStore) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

func (f *fakeStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	f.calls.Add(1)
	f.mu.Lock()
	err, block, entered := f.err, f.block, f.entered
	f.mu.Unlock()
	if block != nil {
		if entered != nil {
			entered <- struct{}{}
		}
		<-block
	}
	return err == nil, err
}

func (f *fakeStore) Ping(ctx context.Context) error { return nil }

// clock is a settable clock for BreakerOptions.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: storetest.T0} }
func errDown(msg string) error       { return errors.Join(window.ErrStore, errors.New(msg)) }
func callBreaker(b *window.Breaker) error {
	_, err := b.Take(context.Background(), storetest.T0, nil, nil)
	return err
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	t.Parallel()
	f, clk := &fakeStore{}, newClock()
	var changes []bool
	b := window.NewBreaker(f, window.BreakerOptions{FailFor: -1, FailureThreshold: 3, OpenFor: time.Second, Now: clk.Now,
		OnStateChange: func(open bool) { changes = append(changes, open) }})

	f.set(errDown("down"))
	callBreaker(b)
	callBreaker(b)
	f.set(nil)
	callBreaker(b) // a success resets the count
	f.set(errDown("down"))
	callBreaker(b)
	callBreaker(b)
	if got := b.State(); got != window.BreakerClosed {
		t.Fatalf("State after 2 consecutive failures = %v, want closed", got)
	}
	// Errors that are not store failures do not count.
	f.set(errors.New("not a store error"))
	callBreaker(b)
	if got := b.State(); got != window.BreakerClosed {
		t.Fatalf("State after a non-store error = %v, want closed", got)
	}
	f.set(errDown("down"))
	callBreaker(b)
	callBreaker(b)
	if got := b.State(); got != window.BreakerOpen {
		t.Fatalf("State after 3 consecutive failures = %v, want open", got)
	}
	before := f.calls.Load()
	err := callBreaker(b)
	if !errors.Is(err, window.ErrCircuitOpen) || !errors.Is(err, window.ErrStore) {
		t.Errorf("Take while open = %v, want ErrCircuitOpen and ErrStore", err)
	}
	if f.calls.Load() != before {
		t.Errorf("Take while open called the store")
	}
	if !slices.Equal(changes, []bool{true}) {
		t.Errorf("OnStateChange calls = %v, want [true]", changes)
	}
}

func TestBreakerHalfOpenLetsOneProbeThrough(t *testing.T) {
	t.Parallel()
	f, clk := &fakeStore{}, newClock()
	var changes []bool
	b := window.NewBreaker(f, window.BreakerOptions{FailFor: -1, FailureThreshold: 1, OpenFor: time.Second, Now: clk.Now,
		OnStateChange: func(open bool) { changes = append(changes, open) }})
	f.set(errDown("down"))
	callBreaker(b)
	clk.Add(999 * time.Millisecond)
	if err := callBreaker(b); !errors.Is(err, window.ErrCircuitOpen) {
		t.Fatalf("Take before OpenFor = %v, want ErrCircuitOpen", err)
	}

	// After OpenFor one probe goes through; it fails: open for another OpenFor.
	clk.Add(time.Millisecond)
	before := f.calls.Load()
	if err := callBreaker(b); errors.Is(err, window.ErrCircuitOpen) || f.calls.Load() != before+1 {
		t.Fatalf("probe = %v (store calls +%d), want the store's error", err, f.calls.Load()-before)
	}
	if got := b.State(); got != window.BreakerOpen {
		t.Fatalf("State after a failed probe = %v, want open", got)
	}
	clk.Add(500 * time.Millisecond)
	if err := callBreaker(b); !errors.Is(err, window.ErrCircuitOpen) {
		t.Fatalf("Take 0.5s after a failed probe = %v, want ErrCircuitOpen", err)
	}

	// The next probe blocks in the store: everyone else is refused meanwhile.
	clk.Add(500 * time.Millisecond)
	f.mu.Lock()
	f.err, f.block, f.entered = nil, make(chan struct{}), make(chan struct{}, 1)
	block, entered := f.block, f.entered
	f.mu.Unlock()
	probeDone := make(chan error)
	go func() { probeDone <- callBreaker(b) }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the probe did not reach the store")
	}
	if got := f.calls.Load(); got != before+2 {
		t.Errorf("store calls = %d, want %d (the failed probe, then this one)", got, before+2)
	}
	if got := b.State(); got != window.BreakerHalfOpen {
		t.Errorf("State during the probe = %v, want half_open", got)
	}
	if err := callBreaker(b); !errors.Is(err, window.ErrCircuitOpen) {
		t.Errorf("Take during the probe = %v, want ErrCircuitOpen", err)
	}
	f.mu.Lock()
	f.block = nil
	f.mu.Unlock()
	close(block)
	if err := <-probeDone; err != nil {
		t.Fatalf("probe = %v, want nil", err)
	}
	if got := b.State(); got != window.BreakerClosed {
		t.Errorf("State after a good probe = %v, want closed", got)
	}
	if err := callBreaker(b); err != nil {
		t.Errorf("Take after closing = %v", err)
	}
	if !slices.Equal(changes, []bool{true, false}) {
		t.Errorf("OnStateChange calls = %v, want [true false]", changes)
	}
}

func TestBreakerIgnoresPartialAndCancelled(t *testing.T) {
	t.Parallel()
	f, clk := &fakeStore{}, newClock()
	b := window.NewBreaker(f, window.BreakerOptions{FailFor: -1, FailureThreshold: 1, Now: clk.Now})
	f.set(&window.PartialError{Failed: []int{1}, Err: errDown("one node down")})
	callBreaker(b)
	if got := b.State(); got != window.BreakerClosed {
		t.Errorf("State after a PartialError = %v, want closed", got)
	}
	f.set(errDown("cancelled"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.Take(ctx, storetest.T0, nil, nil)
	if got := b.State(); got != window.BreakerClosed {
		t.Errorf("State after a call its caller cancelled = %v, want closed", got)
	}
	callBreaker(b)
	if got := b.State(); got != window.BreakerOpen {
		t.Errorf("State after a failure with threshold 1 = %v, want open", got)
	}
}

// TestBreakerOverStoppedRedis: against a stopped redis-server the breaker
// opens after the threshold and then refuses in microseconds; after the
// server is back and OpenFor has passed, it closes.
func TestBreakerOverStoppedRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.BoundedClient(t)
	const openFor = 200 * time.Millisecond
	clk := newClock()
	b := window.NewBreaker(redisstore.New(client, redisstore.Options{}),
		window.BreakerOptions{FailFor: -1, FailureThreshold: 5, OpenFor: openFor, Now: clk.Now})
	takeCtx := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := b.Take(ctx, storetest.T0, []window.Counter{storetest.Req("breaker", 1000, 1)}, make([]window.Result, 1))
		return err
	}
	if err := takeCtx(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := range 5 {
		if err := takeCtx(); err == nil || errors.Is(err, window.ErrCircuitOpen) {
			t.Fatalf("failure %d = %v, want a store error", i, err)
		}
	}
	if got := b.State(); got != window.BreakerOpen {
		t.Fatalf("State after 5 failures = %v, want open", got)
	}
	durations := make([]time.Duration, 100)
	for i := range durations {
		start := time.Now()
		err := takeCtx()
		durations[i] = time.Since(start)
		if !errors.Is(err, window.ErrCircuitOpen) {
			t.Fatalf("Take while open = %v, want ErrCircuitOpen", err)
		}
	}
	slices.Sort(durations)
	if med := durations[50]; med > time.Millisecond {
		t.Errorf("median Take while open = %v, want < 1ms", med)
	}

	srv.Restart(t)
	// Each round lets one probe through; the first may still meet a
	// connection to the old process and fail, and the breaker reopens.
	for range 10 {
		clk.Add(openFor)
		if takeCtx(); b.State() == window.BreakerClosed {
			break
		}
	}
	if got := b.State(); got != window.BreakerClosed {
		t.Fatalf("State after 10 probes against the restarted server = %v, want closed", got)
	}
	if err := takeCtx(); err != nil {
		t.Errorf("Take after closing = %v", err)
	}
}

// TestBreakerIgnoresShortStalls: a burst of failures within FailFor (one
// Redis stall failing every call in flight at once) leaves the circuit
// closed; failures that go on for FailFor open it.
func TestBreakerIgnoresShortStalls(t *testing.T) {
	t.Parallel()
	f, clk := &fakeStore{}, newClock()
	b := window.NewBreaker(f, window.BreakerOptions{FailureThreshold: 5, FailFor: 250 * time.Millisecond, Now: clk.Now})
	f.set(errDown("stall"))
	for range 50 {
		callBreaker(b)
	}
	clk.Add(100 * time.Millisecond)
	callBreaker(b)
	if got := b.State(); got != window.BreakerClosed {
		t.Fatalf("State after 51 failures over 100ms = %v, want closed", got)
	}
	f.set(nil)
	callBreaker(b) // the stall ends: a new streak starts later
	f.set(errDown("down"))
	callBreaker(b)
	clk.Add(200 * time.Millisecond)
	for range 4 {
		callBreaker(b)
	}
	if got := b.State(); got != window.BreakerClosed {
		t.Fatalf("State after 5 failures over 200ms = %v, want closed", got)
	}
	clk.Add(50 * time.Millisecond)
	callBreaker(b)
	if got := b.State(); got != window.BreakerOpen {
		t.Fatalf("State after failures over 250ms = %v, want open", got)
	}
}

// timeoutErr is a network timeout, as a read past its deadline returns.
type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

// TestBreakerMinBudget: with MinBudget, a Take that ran out of time opens
// the circuit only if its budget (Budget, or the time left to its
// deadline) was at least MinBudget; any other store failure opens it
// whatever the budget.
func TestBreakerMinBudget(t *testing.T) {
	t.Parallel()
	deadline := errors.Join(window.ErrStore, context.DeadlineExceeded)
	for _, tc := range []struct {
		name      string
		err       error
		deadline  time.Duration // the caller's; 0: none
		minBudget time.Duration
		budget    func(ctx context.Context, start time.Time) time.Duration
		wantOpen  bool
	}{
		{name: "deadline, 20ms caller", err: deadline, deadline: 20 * time.Millisecond, minBudget: 100 * time.Millisecond},
		{name: "network timeout, 20ms caller", err: errors.Join(window.ErrStore, timeoutErr{}), deadline: 20 * time.Millisecond, minBudget: 100 * time.Millisecond},
		{name: "deadline, 1s caller", err: deadline, deadline: time.Second, minBudget: 100 * time.Millisecond, wantOpen: true},
		{name: "deadline, 1s caller, store capped at 15ms", err: deadline, deadline: time.Second, minBudget: 100 * time.Millisecond,
			budget: func(context.Context, time.Time) time.Duration { return 15 * time.Millisecond }},
		{name: "deadline, no caller deadline", err: deadline, minBudget: 100 * time.Millisecond, wantOpen: true},
		{name: "refused, 20ms caller", err: errDown("connect: connection refused"), deadline: 20 * time.Millisecond, minBudget: 100 * time.Millisecond, wantOpen: true},
		{name: "deadline, 20ms caller, MinBudget 0", err: deadline, deadline: 20 * time.Millisecond, wantOpen: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, clk := &fakeStore{}, newClock()
			f.set(tc.err)
			b := window.NewBreaker(f, window.BreakerOptions{FailureThreshold: 3, FailFor: 250 * time.Millisecond, OpenFor: time.Hour,
				Now: clk.Now, MinBudget: tc.minBudget, Budget: tc.budget})
			for range 10 {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tc.deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				}
				_, _ = b.Take(ctx, storetest.T0, nil, nil)
				cancel()
				clk.Add(100 * time.Millisecond)
			}
			if open := b.State() == window.BreakerOpen; open != tc.wantOpen {
				t.Errorf("open = %v after 10 failed Takes over 1s, want %v", open, tc.wantOpen)
			}
		})
	}
}
