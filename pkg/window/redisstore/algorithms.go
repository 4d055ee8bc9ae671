package redisstore

import (
	"fmt"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// scriptAlgorithm is what the script's protocol knows of one
// window.Algorithm: how a counter of it goes in the full form of a call
// and how its three reply values read. It sits beside the take script, whose
// section of that algorithm reads the same arguments and writes the same
// values; window.Algorithm's own table (pkg/window) holds the rest, with
// no knowledge of the script.
type scriptAlgorithm struct {
	// short reports whether a plain counter of it may go in the script's
	// short form (see plain and take.lua).
	short bool
	// args appends the counter c's five full-form arguments at nowMs:
	// its section of the take script (lua/) names them; flags holds
	// SHADOW, REFUND and CHARGE, to which args adds its own.
	args func(dst []any, c *window.Counter, nowMs int64, flags int) []any
	// read reads c's three reply values into its Result.
	read func(c *window.Counter, n [3]int64) (window.Result, error)
}

// scriptAlgorithms is the table a window.Algorithm indexes here.
var scriptAlgorithms = [...]scriptAlgorithm{
	window.FixedWindow:   {short: true, args: fixedArgs, read: windowRead},
	window.SlidingWindow: {args: slidingArgs, read: windowRead},
	window.TokenBucket:   {args: bucketArgs, read: bucketResult},
	window.SlidingLog:    {args: logArgs, read: logResult},
}

// scriptOf returns a's entry; FixedWindow's for an unknown a, as
// window.Algorithm does.
func scriptOf(a window.Algorithm) *scriptAlgorithm {
	if int(a) < len(scriptAlgorithms) {
		return &scriptAlgorithms[a]
	}
	return &scriptAlgorithms[window.FixedWindow]
}

// fixedArgs: limit, hits, TTL ms, flags, 0; in the reference layout its TTL
// in seconds, EXPIRE's, as envoyproxy/ratelimit sets it.
func fixedArgs(dst []any, c *window.Counter, _ int64, flags int) []any {
	if c.Reference {
		return append(dst, c.Limit, c.Hits, int64(c.TTL()/time.Second), flags|flagRef, 0)
	}
	return append(dst, c.Limit, c.Hits, c.TTL().Milliseconds(), flags, 0)
}

// slidingArgs: limit, hits, TTL ms, flags, the previous window's weight.
func slidingArgs(dst []any, c *window.Counter, nowMs int64, flags int) []any {
	w := window.AtMillis(nowMs, c.Size.Milliseconds())
	return append(dst, c.Limit, c.Hits, c.TTL().Milliseconds(), flags|flagSliding, c.Weight(w, nowMs))
}

// bucketArgs: tolerance ns, hits, now ms, flags, interval ns.
func bucketArgs(dst []any, c *window.Counter, nowMs int64, flags int) []any {
	return append(dst, int64(c.Tolerance()), c.Hits, nowMs, flags|flagToken, int64(c.Interval()))
}

// logArgs: limit, hits, now ms, flags, window ms.
func logArgs(dst []any, c *window.Counter, nowMs int64, flags int) []any {
	return append(dst, c.Limit, c.Hits, nowMs, flags|flagLog, c.Size.Milliseconds())
}

// windowRead reads a window's values: current, previous, over 0 or 1.
func windowRead(_ *window.Counter, n [3]int64) (window.Result, error) {
	return window.Result{Count: uint64(n[0]), Previous: uint64(n[1]), Over: n[2] == 1}, nil
}

// bucketResult reads a TokenBucket counter's values (empty ns, retry ns,
// over 0 or 1; see lua/bucket.lua) into its Result, as window.Memory makes it
// (window.Counter.BucketResult).
func bucketResult(c *window.Counter, n [3]int64) (window.Result, error) {
	empty, retry, over := n[0], n[1], n[2]
	if over > 1 || over == 0 && retry != 0 {
		return window.Result{}, fmt.Errorf("%w: unexpected token bucket values %v", window.ErrStore, n)
	}
	return c.BucketResult(time.Duration(empty), over == 1, time.Duration(retry)), nil
}

// maxLogMs bounds a SlidingLog's times in a reply, so that they fit a
// time.Duration: a log's entries leave within the longest window.
const maxLogMs = int64(window.MaxSize / time.Millisecond)

// logResult reads a SlidingLog counter's values (count, empty ms, 0 or 1 +
// retry ms; see lua/log.lua) into its Result.
func logResult(_ *window.Counter, n [3]int64) (window.Result, error) {
	count, empty, over := n[0], n[1], n[2]
	if empty > maxLogMs || over > maxLogMs+1 || count == 0 && empty != 0 {
		return window.Result{}, fmt.Errorf("%w: unexpected sliding log values %v", window.ErrStore, n)
	}
	res := window.Result{Count: uint64(count), Over: over > 0, Empty: time.Duration(empty) * time.Millisecond}
	if over > 0 {
		res.Retry = time.Duration(over-1) * time.Millisecond
	}
	return res, nil
}
