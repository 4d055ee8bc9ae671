package redisstore

import (
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// The script's arguments are built by the functions below straight into the
// []any that go-redis writes: numbers as integers (go-redis formats them into
// its write buffer, no strings) and keys as pointers to slices of one byte
// arena (see keyArg). The batch worker reuses the list, the arena, the keys
// and its triples from call to call; what is left is boxing each number of
// 256 or more (Go boxes smaller ones without allocating): per triple its ttl
// and large limits, per full-form counter its ttl, large limits and weight.

// take is one Take's part of a script call (a batch carries several),
// which the script decides on its own: the counters reqs[idx] (all of reqs
// when idx is nil) at nowMs.
type take struct {
	nowMs int64
	reqs  []window.Counter
	idx   []int
	short bool // sent in the script's short form; see newTake
}

// newTake returns the take of reqs[idx] at nowMs. It goes in the
// script's short form (see take.lua) when every counter is plain (see
// plain) and on a key of its own.
func newTake(nowMs int64, reqs []window.Counter, idx []int) take {
	r := take{nowMs: nowMs, reqs: reqs, idx: idx, short: true}
	for j := range r.len() {
		c := r.at(j)
		if !plain(c) {
			r.short = false
			break
		}
		for i := range j {
			if o := r.at(i); o.Key == c.Key && o.Size == c.Size {
				r.short = false // the same counter twice: the full form adds them up
				break
			}
		}
	}
	return r
}

// len is how many counters r carries.
func (r *take) len() int {
	if r.idx != nil {
		return len(r.idx)
	}
	return len(r.reqs)
}

// at is r's j-th counter.
func (r *take) at(j int) *window.Counter {
	if r.idx != nil {
		return &r.reqs[r.idx[j]]
	}
	return &r.reqs[j]
}

// plain reports whether r is a plain counter, which the script's short form
// can carry: a fixed window in this project's layout, not a shadow, a
// refund or a charge, hits >= 1.
func plain(r *window.Counter) bool {
	return scriptOf(r.Algorithm).short && !r.Shadow && !r.Refund && !r.Charge && r.Hits >= 1 && !r.Reference
}

// callBuf is the memory script calls are built in: the argument list, the
// byte arena the keys are slices of, and the triples. The batch worker
// keeps one from call to call. The zero callBuf is ready to use; it is not
// safe for concurrent use.
type callBuf struct {
	args    []any
	arena   []byte
	keys    []keyArg // what args' keys point to
	triples triples
	shared  sharedKeys
}

// build returns the script call of rs in b's memory, valid until the next
// build or release: EVALSHA, the hash, the key count, the shared keys,
// every request's keys, then the count of triples and of shared keys, every
// request's arguments, the triples and the shared keys' planned hits (see
// take.lua). It is the one place a call is laid out.
func (b *callBuf) build(rs []take) []any {
	args, arena, keys := append(b.args[:0], "evalsha", takeHash, 0), b.arena[:0], b.keys[:0]
	for i := range rs {
		args, arena, keys = appendKeys(args, arena, keys, &b.shared, &rs[i])
	}
	b.keys = keys
	args = b.shared.insertKeys(args, 3)
	args[2] = len(args) - 3 // the key count
	head := len(args)
	args = append(args, 0, b.shared.count) // the count of triples is known at the end
	for i := range rs {
		args = appendArgs(args, &b.triples, &rs[i])
	}
	args = b.triples.appendTo(args, head)
	b.args, b.arena = b.shared.appendPlanned(args), arena
	return b.args
}

// release lets go of the keys of the last call and keeps the memory.
func (b *callBuf) release() {
	clear(b.args)
	clear(b.keys)
	b.args, b.arena, b.keys = b.args[:0], b.arena[:0], b.keys[:0]
}

// keyArg is a script key in a call's arguments, a slice of its callBuf's
// arena. It goes in as a pointer into the callBuf's list of keys, which is
// kept from call to call, so boxing it allocates nothing where boxing a
// []byte would allocate for every key; go-redis writes it through
// MarshalBinary.
type keyArg struct{ b []byte }

// MarshalBinary returns the key's bytes, which the caller must not change.
func (k *keyArg) MarshalBinary() ([]byte, error) { return k.b, nil }

// String returns the key, for error messages.
func (k *keyArg) String() string { return string(k.b) }

// keyOf returns the bytes of v, a key in a call's arguments.
func keyOf(v any) []byte { return v.(*keyArg).b }

// callArgs returns the script call of the one request reqs[idx] at nowMs,
// in memory of its own.
func callArgs(nowMs int64, reqs []window.Counter, idx []int) []any {
	var b callBuf
	return b.build([]take{newTake(nowMs, reqs, idx)})
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
func (t *triples) number(r *window.Counter) int {
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

// appendKeys appends r's script keys to dst, each a slice of arena held
// by a new element of keys: per counter its current window's key and, for
// a sliding window, the previous window's; a TokenBucket's or SlidingLog's
// one key. It adds each window key to sk.
func appendKeys(dst []any, arena []byte, keys []keyArg, sk *sharedKeys, r *take) ([]any, []byte, []keyArg) {
	for j := range r.len() {
		c := r.at(j)
		from := len(arena)
		arena = c.AppendStoreKey(arena, r.nowMs)
		k := arena[from:len(arena):len(arena)]
		dst, keys = appendKey(dst, keys, k)
		if !c.Algorithm.Windowed() || c.Reference {
			continue // decided exactly one command per use; see take.lua
		}
		w := window.AtMillis(r.nowMs, c.Size.Milliseconds())
		var planned uint64 // the hits the script bets on; see take.lua
		if !c.Refund {
			planned = c.Hits
		}
		sk.add(dst, k, len(dst)-1, planned)
		if c.Algorithm.ReadsPrevious() {
			from = len(arena)
			arena = window.AppendWindow(append(arena, c.Key...), w.Previous())
			k = arena[from:len(arena):len(arena)]
			dst, keys = appendKey(dst, keys, k)
			sk.add(dst, k, len(dst)-1, 0)
		}
	}
	return dst, arena, keys
}

// appendKey appends k to dst as a pointer to a new element of keys.
// Both arena and keys may grow while a call is built: a slice or pointer
// taken before keeps pointing at the old array, whose elements are never
// written again during the call, so it stays valid.
func appendKey(dst []any, keys []keyArg, k []byte) ([]any, []keyArg) {
	keys = append(keys, keyArg{k})
	return append(dst, &keys[len(keys)-1]), keys
}

// The flags of a full-form counter, added up; take.lua names the same
// values SHADOW, REFUND, SLIDING, CHARGE, TOKEN and LOG.
const (
	flagShadow  = 1  // checked and counted, but never denies
	flagRefund  = 2  // hits are given back instead of taken
	flagSliding = 4  // estimate = previous*weight + current
	flagCharge  = 8  // hits are counted even when the request is denied; never with flagRefund
	flagToken   = 16 // a token bucket (GCRA)
	flagLog     = 32 // a sliding log
	flagRef     = 64 // envoyproxy/ratelimit's counting; window.Counter.Reference
)

// appendArgs appends r's script arguments to dst: in the short form minus
// the counter count and per counter the number of its triple, added to t;
// else the count and five values per counter.
func appendArgs(dst []any, t *triples, r *take) []any {
	n := r.len()
	if r.short {
		dst = append(dst, shortHead(n))
		for j := range n {
			dst = append(dst, t.number(r.at(j)))
		}
		return dst
	}
	dst = append(dst, n)
	for j := range n {
		c := r.at(j)
		flags := 0
		if c.Shadow {
			flags |= flagShadow
		}
		if c.Refund {
			flags |= flagRefund
		}
		if c.Charge && !c.Refund { // take.lua takes CHARGE as sent
			flags |= flagCharge
		}
		dst = scriptOf(c.Algorithm).args(dst, c, r.nowMs, flags)
	}
	return dst
}
