package window

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCircuitOpen reports a Take that a Breaker refused without calling its
// store. Errors that wrap it also wrap ErrStore, so callers that apply
// failure modes on ErrStore need no special case.
var ErrCircuitOpen = errors.New("window: circuit open")

// errOpen is returned while the circuit is open; one value, so that a
// refused call allocates nothing.
var errOpen = fmt.Errorf("%w: %w", ErrStore, ErrCircuitOpen)

// BreakerState is the state of a Breaker's circuit.
type BreakerState int32

const (
	// BreakerClosed lets every call through to the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every call at once with ErrCircuitOpen.
	BreakerOpen
	// BreakerHalfOpen lets one probe call through; the others are refused.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// BreakerOptions configure a Breaker. The zero value is usable.
type BreakerOptions struct {
	// FailureThreshold is how many consecutive failed Takes open the
	// circuit, if they also span FailFor. Default 5.
	FailureThreshold int
	// FailFor is how long a streak of failures must last before it opens
	// the circuit. Under load, one Redis stall longer than the timeout
	// fails every call in flight at once: a count alone would turn a 20 ms
	// hiccup into an OpenFor-long outage. Default 250 ms; negative: the
	// count alone opens the circuit.
	FailFor time.Duration
	// OpenFor is how long the circuit stays open before it lets one probe
	// through. Default 1s.
	OpenFor time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// MinBudget: a Take that ran out of time (a deadline or a network
	// timeout) counts as a failure only if it had at least this long (see
	// Budget); a shorter one counts as neither success nor failure, since
	// its budget, not the store, may be what failed: a caller that waits
	// 15 ms on a machine starved of CPU runs out of time against a store
	// that answers every other call. Every other failure (a refused or
	// lost connection, an error from the store) counts whatever the budget.
	// Zero: every timeout counts.
	MinBudget time.Duration
	// Budget returns how long the store gives a Take under ctx that starts
	// at start (a real time, like ctx's deadline), for MinBudget; a store
	// that caps its calls (redisstore.Store.Budget) says so here. Default:
	// the time left to ctx's deadline, unbounded without one.
	Budget func(ctx context.Context, start time.Time) time.Duration
	// OnStateChange, if set, is called with true when the circuit opens
	// and false when it closes again (not on the moves between open and
	// half-open). It runs synchronously inside the Take that caused the
	// change, in order; it may call State but must not call Take.
	OnStateChange func(open bool)
}

// Breaker is a store that wraps another (a Redis) with a circuit breaker, so
// that a store that is down or hanging costs requests microseconds instead
// of a timeout each.
//
// A Take that fails with an error wrapping ErrStore counts as a failure;
// after FailureThreshold consecutive failures spanning at least FailFor (a
// store that stays down, not a stall) the circuit opens and every
// Take returns at once an error wrapping ErrStore and ErrCircuitOpen. After
// OpenFor it is half-open: the next Take is a probe that goes through while
// the others are still refused; if the probe succeeds the circuit closes, if
// it fails it opens for another OpenFor. A *PartialError counts as a success
// (part of the store answered; the failed part is left to the caller's
// failure modes); a Take whose context was cancelled by the caller, that ran
// out of a budget shorter than MinBudget, or that failed with an error not
// wrapping ErrStore, counts as neither. Ping always goes through and never changes the state,
// so health checks see the store itself.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	store     Store
	threshold int
	failFor   time.Duration
	openFor   time.Duration
	now       func() time.Time
	onChange  func(open bool)
	minBudget time.Duration
	budget    func(ctx context.Context, start time.Time) time.Duration

	state    atomic.Int32 // BreakerState, read without the lock on the fast path
	failures atomic.Int32 // consecutive failures while closed
	streak   atomic.Int64 // Unix ns of the streak's first failure

	mu      sync.Mutex // serializes state changes
	until   time.Time  // end of the open period
	probing bool       // a half-open probe is in flight
}

// NewBreaker returns a closed Breaker around store.
func NewBreaker(store Store, opts BreakerOptions) *Breaker {
	b := &Breaker{store: store, threshold: opts.FailureThreshold, failFor: opts.FailFor, openFor: opts.OpenFor, now: opts.Now, onChange: opts.OnStateChange,
		minBudget: opts.MinBudget, budget: opts.Budget}
	if b.threshold <= 0 {
		b.threshold = 5
	}
	if b.failFor == 0 {
		b.failFor = 250 * time.Millisecond
	}
	if b.openFor <= 0 {
		b.openFor = time.Second
	}
	if b.now == nil {
		b.now = time.Now
	}
	return b
}

// State returns the circuit's state, for metrics.
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// Ping pings the store, whatever the state.
func (b *Breaker) Ping(ctx context.Context) error { return b.store.Ping(ctx) }

// Take calls the store's Take unless the circuit is open; see Breaker.
func (b *Breaker) Take(ctx context.Context, now time.Time, reqs []Counter, res []Result) (bool, error) {
	probe, err := b.admit()
	if err != nil {
		return false, err
	}
	var start time.Time
	if b.minBudget > 0 {
		start = time.Now() // real time, as ctx's deadline; not b.now
	}
	ok, err := b.store.Take(ctx, now, reqs, res)
	b.record(ctx, probe, err, start)
	return ok, err
}

// shortOfTime reports whether err says a Take that started at start under
// ctx ran out of a budget shorter than MinBudget: not the store's fault
// for certain (see BreakerOptions.MinBudget).
func (b *Breaker) shortOfTime(ctx context.Context, err error, start time.Time) bool {
	var te interface{ Timeout() bool }
	if b.minBudget <= 0 || !errors.As(err, &te) || !te.Timeout() {
		return false
	}
	budget := time.Duration(1<<63 - 1)
	if b.budget != nil {
		budget = b.budget(ctx, start)
	} else if dl, ok := ctx.Deadline(); ok {
		budget = dl.Sub(start)
	}
	return budget < b.minBudget
}

// admit decides whether a call may go to the store, and whether it is the
// half-open probe.
func (b *Breaker) admit() (probe bool, err error) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return false, nil
	case BreakerOpen:
		if b.now().Before(b.until) {
			return false, errOpen
		}
		b.state.Store(int32(BreakerHalfOpen))
	}
	if b.probing {
		return false, errOpen
	}
	b.probing = true
	return true, nil
}

// storeFailed reports whether err says the store failed as a whole. It is
// a function of its own so that the PartialError it needs is allocated only
// on errors, not on every call.
func storeFailed(err error) bool {
	var pe *PartialError
	return errors.Is(err, ErrStore) && !errors.As(err, &pe)
}

// record updates the state with the outcome of a call that went through.
func (b *Breaker) record(ctx context.Context, probe bool, err error, start time.Time) {
	failed := err != nil && storeFailed(err)
	// Neither success nor failure: the caller gave up (Envoy went away),
	// the call ran out of a budget too short to blame the store, or an
	// error that is not the store's.
	neutral := failed && (errors.Is(ctx.Err(), context.Canceled) || b.shortOfTime(ctx, err, start)) ||
		err != nil && !errors.Is(err, ErrStore)
	if !probe {
		switch {
		case neutral || BreakerState(b.state.Load()) != BreakerClosed:
			// Let through before the circuit opened: too late to matter.
		case !failed:
			if b.failures.Load() != 0 {
				b.failures.Store(0)
			}
		default:
			now := b.now().UnixNano()
			n := int(b.failures.Add(1))
			if n == 1 {
				b.streak.Store(now)
			}
			if n < b.threshold || time.Duration(now-b.streak.Load()) < b.failFor {
				return
			}
			b.mu.Lock()
			if BreakerState(b.state.Load()) == BreakerClosed {
				b.open(true)
			}
			b.mu.Unlock()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	switch {
	case neutral:
		// Still half-open: the next call probes.
	case failed:
		b.open(false)
	default:
		b.failures.Store(0)
		b.state.Store(int32(BreakerClosed))
		if b.onChange != nil {
			b.onChange(false)
		}
	}
}

// open opens the circuit for openFor, reporting it if it was closed; b.mu
// is held.
func (b *Breaker) open(wasClosed bool) {
	b.until = b.now().Add(b.openFor)
	b.failures.Store(0)
	b.state.Store(int32(BreakerOpen))
	if wasClosed && b.onChange != nil {
		b.onChange(true)
	}
}
