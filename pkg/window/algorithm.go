package window

import "time"

// Algorithm says how a counter measures a request against its limit. The
// zero Algorithm is FixedWindow.
//
// Each Algorithm indexes algorithmTable, the table of what it knows, one value
// per file (fixed.go, sliding.go, bucket.go, log.go): stores, the over-limit
// cache and the callers of Counter's methods ask that value instead of
// switching on the Algorithm. The values are empty structs held as
// interfaces, so looking one up allocates nothing.
type Algorithm uint8

const (
	// FixedWindow counts hits in the current epoch-aligned window only. A
	// client can send up to twice its limit across a window boundary.
	FixedWindow Algorithm = iota
	// SlidingWindow weighs the previous window's count by the share of it
	// that a rolling window still covers: previous*(1-elapsed) + current.
	// It reads two counters and writes only the current one.
	SlidingWindow
	// TokenBucket is the generic cell rate algorithm (GCRA): a bucket of
	// Burst tokens that refills Limit tokens per Size, one token every
	// Interval. Its state is one theoretical arrival time (TAT): the
	// bucket is full when the TAT is not after now. Over any interval of
	// length T it admits at most Burst + Limit*T/Size hits.
	TokenBucket
	// SlidingLog keeps the time of every counted hit of the last window
	// and admits a request when the hits of the window ending now, plus
	// its own, fit the limit: in any window of length Size it admits at
	// most Limit hits. Its memory grows with the limit.
	SlidingLog
)

// algorithmTable is the table an Algorithm indexes.
var algorithmTable = [...]algorithm{
	FixedWindow:   fixedWindow{},
	SlidingWindow: slidingWindow{},
	TokenBucket:   tokenBucket{},
	SlidingLog:    slidingLog{},
}

// algorithm is everything one Algorithm knows. r is always a request of
// that algorithm.
type algorithm interface {
	// name is what rules call it (Algorithm.String).
	name() string

	// The key shape (AppendKeyCounter, AppendStoreKey).

	// keyName is what AppendKeyCounter appends for it: "" for the default.
	keyName() string
	// windowed reports whether it counts hits in epoch-aligned windows:
	// its key ends with the window's start, and its counter is an integer
	// that several requests may add to (a shared key; see redisstore).
	// Otherwise its one key ends with ":<size ms>".
	windowed() bool
	// readsPrevious reports whether it also reads the previous window.
	readsPrevious() bool
	// ttl is Counter.TTL for a counter not in the Reference layout.
	ttl(r *Counter) time.Duration
	// weight is Counter.Weight.
	weight(r *Counter, w Window, nowMs int64) float64

	// The decision.

	// need is the room r must find: its hits, or for a check (0 hits)
	// what the algorithm asks of one.
	need(r *Counter) uint64
	// check reads r's state in m at nowMs and decides whether r fits
	// after pending hits of earlier requests of the call on the same
	// counter (Memory.Take).
	check(m *Memory, r *Counter, pending uint64, nowMs int64) Result
	// count adds r's hits to its state in m (or gives them back) and
	// updates res.
	count(m *Memory, r *Counter, res *Result, nowMs int64)
	// taken is how much of Used hits counted by r account for
	// (Counter.Taken).
	taken(r *Counter, hits uint64) uint64
	// undo turns r, already a copy with Refund set, into the refund that
	// gives back what r counted on its current state (Counter.Undo).
	undo(r *Counter)

	// The over-limit cache's local answer (OverLimitCache).

	// cacheable reports whether a full counter of it stays full until a
	// time the cache can know.
	cacheable() bool
	// readDecides reports whether a read of r's counter with no hits
	// tells whether r, after earlier requests of the call, fits.
	readDecides(r *Counter, earlier []Counter) bool
	// decideRead decides r from read, its counter read with no hits,
	// after pending hits on the same counter.
	decideRead(r *Counter, read Result, pending uint64, nowMs int64) Result
	// full returns how long res, r's answer after pending hits, shows
	// its counter full, and false when it does not.
	full(r *Counter, res Result, pending uint64, nowMs int64) (fullUntil, bool)
	// askStore reports whether r must go to the store even though its
	// counter is known full as f says.
	askStore(r *Counter, f fullUntil) bool
	// fullResult is r's Result when its counter is known full as f says.
	fullResult(r *Counter, f fullUntil, nowMs int64) Result

	// What responses report.

	// capacity is Algorithm.Capacity.
	capacity(limit, burst uint64) uint64
	// used is Counter.Used.
	used(r *Counter, res Result, now time.Time) uint64
	// reset is Counter.Reset.
	reset(r *Counter, res Result, now time.Time) time.Duration
	// retryAfter is Counter.RetryAfter.
	retryAfter(r *Counter, res Result, now time.Time) time.Duration
	// failClosed is Counter.FailClosed.
	failClosed(r *Counter, now time.Time) (reset, wait time.Duration)
	// takesBurst is Algorithm.TakesBurst.
	takesBurst() bool
	// retryByClock is Algorithm.RetryByClock.
	retryByClock() bool
	// referenceLayout is Algorithm.ReferenceLayout.
	referenceLayout() bool
}

// alg returns a's value in the table; FixedWindow's for an unknown a.
func (a Algorithm) alg() algorithm {
	if int(a) < len(algorithmTable) {
		return algorithmTable[a]
	}
	return algorithmTable[FixedWindow]
}

// String returns the name rules use: "fixed_window", "sliding_window",
// "token_bucket" or "sliding_log"; "fixed_window" for an unknown value.
func (a Algorithm) String() string { return a.alg().name() }

// ParseAlgorithm returns the Algorithm that String names, and false for
// any other name.
func ParseAlgorithm(name string) (Algorithm, bool) {
	for a, v := range algorithmTable {
		if v.name() == name {
			return Algorithm(a), true
		}
	}
	return FixedWindow, false
}

// Windowed reports whether a counts hits in epoch-aligned windows: its
// counters are integers, one per window, whose key ends with the window's
// start, so that several requests may add to one (FixedWindow and
// SlidingWindow). A TokenBucket's or SlidingLog's state is one key per
// counter, whatever the time.
func (a Algorithm) Windowed() bool { return a.alg().windowed() }

// ReadsPrevious reports whether a counter of a reads the previous window's
// counter too (SlidingWindow), whose key a store must read.
func (a Algorithm) ReadsPrevious() bool { return a.alg().readsPrevious() }

// Capacity returns the most hits a counter of a with limit and burst (0:
// limit) holds: limit, or for TokenBucket the burst; 0 when limit is 0,
// which admits nothing whatever the burst.
func (a Algorithm) Capacity(limit, burst uint64) uint64 { return a.alg().capacity(limit, burst) }

// TakesBurst reports whether a limit of a takes a burst (TokenBucket).
func (a Algorithm) TakesBurst() bool { return a.alg().takesBurst() }

// RetryByClock reports whether the RetryAfter of a denial by a full
// counter of a depends on its window and the clock alone, so it is the
// same for every key of a limit at one time (FixedWindow): the others'
// depend on the key's own state.
func (a Algorithm) RetryByClock() bool { return a.alg().retryByClock() }

// ReferenceLayout reports whether a counter of a can be kept in
// envoyproxy/ratelimit's layout (Counter.Reference), which has fixed
// windows only.
func (a Algorithm) ReferenceLayout() bool { return a.alg().referenceLayout() }

// timedState is what TokenBucket and SlidingLog share: one state per
// counter, whatever the time, that frees room only as time passes, so a
// denial of one hit is exact until its Retry and Result carries Empty and
// Retry. Their values embed it.
type timedState struct{}

func (timedState) windowed() bool      { return false }
func (timedState) readsPrevious() bool { return false }

// ttl is a window's, as a bound for what is stored: a store keeps a
// bucket until it is full again (bucketTTL), a log a window after its
// last hit.
func (timedState) ttl(r *Counter) time.Duration {
	return time.Duration(r.Size.Milliseconds()+1000) * time.Millisecond
}

func (timedState) weight(*Counter, Window, int64) float64 { return 0 }

// need is one hit for a check: a check asks whether one more would fit.
func (timedState) need(r *Counter) uint64 { return max(r.Hits, 1) }

func (timedState) cacheable() bool                   { return true }
func (timedState) askStore(*Counter, fullUntil) bool { return false }

func (timedState) full(r *Counter, res Result, pending uint64, nowMs int64) (fullUntil, bool) {
	return retryFull(r, res, pending, nowMs)
}

func (timedState) used(_ *Counter, res Result, _ time.Time) uint64 { return res.Count }

// reset is Empty: the time until the bucket is full, or the log empty.
func (timedState) reset(_ *Counter, res Result, _ time.Time) time.Duration { return res.Empty }

func (timedState) retryAfter(_ *Counter, res Result, _ time.Time) time.Duration { return res.Retry }

func (timedState) retryByClock() bool    { return false }
func (timedState) referenceLayout() bool { return false }
