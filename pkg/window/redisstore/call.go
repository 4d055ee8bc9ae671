package redisstore

import (
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// The script's arguments are built by the functions below straight into the
// []any that go-redis writes: numbers as integers (go-redis formats them into
// its write buffer, no strings) and keys as slices of one byte arena. The
// batch worker reuses the list, the arena and its triples from call to call;
// what is left is boxing each key slice, and each other number of 256 or
// more (Go boxes smaller ones without allocating): per triple its ttl and
// large limits, per full-form counter its ttl, large limits and weight.

// callSize is how many requests a call of reqs[idx] (all of reqs when idx
// is nil) carries.
func callSize(reqs []window.Request, idx []int) int {
	if idx != nil {
		return len(idx)
	}
	return len(reqs)
}

// callReq is the j-th request of a call of reqs[idx].
func callReq(reqs []window.Request, idx []int, j int) *window.Request {
	if idx != nil {
		return &reqs[idx[j]]
	}
	return &reqs[j]
}

// shortCall reports whether a call of reqs[idx] goes in the script's short
// form (see take.lua): every request a plain counter (plain), each
// on a key of its own.
func shortCall(reqs []window.Request, idx []int) bool {
	for j := range callSize(reqs, idx) {
		r := callReq(reqs, idx, j)
		if !plain(r) {
			return false
		}
		for i := range j {
			if o := callReq(reqs, idx, i); o.Key == r.Key && o.Size == r.Size {
				return false // the same counter twice: the full form adds them up
			}
		}
	}
	return true
}

// plain reports whether r is a plain counter, which the script's short form
// can carry: a fixed window, not a shadow, not a refund, hits >= 1.
func plain(r *window.Request) bool {
	return r.Algorithm != window.SlidingWindow && !r.Shadow && !r.Refund && r.Hits >= 1
}

// appendCall appends to dst[:0] a whole script call for reqs[idx]: EVALSHA,
// the hash, the key count, the keys and the arguments. Keys are appended to
// arena, which is returned for reuse once the call is done.
func appendCall(dst []any, arena []byte, nowMs int64, reqs []window.Request, idx []int) ([]any, []byte) {
	dst, arena = appendKeys(callStart(dst), arena, nowMs, reqs, idx)
	dst, head := callArgs(dst)
	var t triples
	dst = appendArgs(dst, &t, shortCall(reqs, idx), nowMs, reqs, idx)
	return t.appendTo(dst, head), arena
}

// callStart begins a call in dst[:0]: EVALSHA, the hash and a place for the
// key count. The keys follow (appendKeys), then callArgs.
func callStart(dst []any) []any { return append(dst[:0], "evalsha", takeHash, 0) }

// callArgs ends the keys of a call begun by callStart and begins its
// arguments with a place for the count of triples, at head (see
// triples.appendTo). The requests' arguments follow (appendArgs).
func callArgs(dst []any) (_ []any, head int) {
	dst[2] = len(dst) - 3
	return append(dst, 0), len(dst)
}

// triples gathers the distinct (limit, hits, TTL) triples of a call's
// short-form counters. Each such counter names its triple by number, and
// the triples go once at the end of the call: under load most counters of a
// batch share a rule, so Redis reads one argument per counter instead of
// three (see take.lua). The zero value holds none; it is not safe for
// concurrent use.
type triples struct {
	list []triple
	// index numbers the triples once there are more than triplesScanned:
	// hits (and, with overrides, limits) come from requests, so a batch can
	// hold as many triples as counters, and a scan would cost the one batch
	// worker quadratic time. It is in use exactly when the list is longer
	// than triplesScanned; kept, cleared, from call to call.
	index map[triple]int
}

// triplesScanned is how many triples number finds by scanning the list.
const triplesScanned = 8

type triple struct {
	limit, hits uint64
	ttl         int64 // milliseconds
}

// number returns the number, from 1, of r's triple, adding it if new.
func (t *triples) number(r *window.Request) int {
	want := triple{r.Limit, r.Hits, r.TTL().Milliseconds()}
	if len(t.list) <= triplesScanned {
		for i, have := range t.list {
			if have == want {
				return i + 1
			}
		}
		if len(t.list) < triplesScanned {
			t.list = append(t.list, want)
			return len(t.list)
		}
		if t.index == nil {
			t.index = make(map[triple]int)
		}
		for i, have := range t.list {
			t.index[have] = i + 1
		}
	}
	if n, ok := t.index[want]; ok {
		return n
	}
	t.list = append(t.list, want)
	t.index[want] = len(t.list)
	return len(t.list)
}

// appendTo ends a call: it appends the triples to dst, writes their count
// to dst[head], the call's first argument, and empties t for the next call.
func (t *triples) appendTo(dst []any, head int) []any {
	dst[head] = len(t.list)
	for _, have := range t.list {
		dst = append(dst, have.limit, have.hits, have.ttl)
	}
	if len(t.list) > triplesScanned {
		clear(t.index)
	}
	t.list = t.list[:0]
	return dst
}

// shortHeads are the short form's request heads -1, -2, ... boxed once: a
// negative integer would otherwise be boxed anew for every request.
var shortHeads = func() []any {
	h := make([]any, 16)
	for i := range h {
		h[i] = -(i + 1)
	}
	return h
}()

// shortHead returns the boxed head of a short-form request of n counters.
func shortHead(n int) any {
	if n >= 1 && n <= len(shortHeads) {
		return shortHeads[n-1]
	}
	return -n
}

// appendKeys appends the script keys of a call of reqs[idx] to dst, each a
// slice of arena: per request its current window's key and, for a sliding
// window, the previous window's.
func appendKeys(dst []any, arena []byte, nowMs int64, reqs []window.Request, idx []int) ([]any, []byte) {
	for j := range callSize(reqs, idx) {
		r := callReq(reqs, idx, j)
		w := window.AtMillis(nowMs, r.Size.Milliseconds())
		// A slice taken before arena grows keeps pointing at the old array,
		// whose bytes are never written again: it stays valid.
		from := len(arena)
		arena = window.AppendWindow(append(arena, r.Key...), w)
		dst = append(dst, arena[from:len(arena):len(arena)])
		if r.Algorithm == window.SlidingWindow {
			from = len(arena)
			arena = window.AppendWindow(append(arena, r.Key...), w.Previous())
			dst = append(dst, arena[from:len(arena):len(arena)])
		}
	}
	return dst, arena
}

// appendArgs appends one script request, all counters of reqs[idx] (all of
// reqs when idx is nil), to dst: in the short form (short, from shortCall) minus the
// counter count and per counter the number of its triple, added to t; else
// the count and five values per counter.
func appendArgs(dst []any, t *triples, short bool, nowMs int64, reqs []window.Request, idx []int) []any {
	n := callSize(reqs, idx)
	if short {
		dst = append(dst, shortHead(n))
		for j := range n {
			dst = append(dst, t.number(callReq(reqs, idx, j)))
		}
		return dst
	}
	dst = append(dst, n)
	for j := range n {
		r := callReq(reqs, idx, j)
		w := window.AtMillis(nowMs, r.Size.Milliseconds())
		flags := 0
		if r.Shadow {
			flags |= 1
		}
		if r.Refund {
			flags |= 2
		}
		if r.Algorithm == window.SlidingWindow {
			flags |= 4
		}
		dst = append(dst, r.Limit, r.Hits, r.TTL().Milliseconds(), flags, r.Weight(w, nowMs))
	}
	return dst
}
