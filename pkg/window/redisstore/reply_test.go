package redisstore

import (
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// FuzzParseRequest feeds the script-reply parser any reply of int64 values
// (and a string, which a broken script could return) for any number of
// counters: it must never panic, and a reply it accepts must be one the
// script can send.
func FuzzParseRequest(f *testing.F) {
	f.Add(uint8(1), []byte{1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0})                                                 // short, allowed, count 7
	f.Add(uint8(1), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})                         // short, denied, over at 5
	f.Add(uint8(2), []byte{0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) // short, two
	f.Add(uint8(1), []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // full form
	f.Add(uint8(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})                         // failed
	f.Add(uint8(3), []byte{})
	f.Fuzz(func(t *testing.T, n uint8, raw []byte) {
		counters := int(n%8) + 1
		vals := make([]any, 0, len(raw)/8+1)
		for len(raw) >= 8 {
			var v int64
			for i := range 8 {
				v |= int64(raw[i]) << (8 * i)
			}
			vals = append(vals, v)
			raw = raw[8:]
		}
		if len(raw) > 0 {
			vals = append(vals, string(raw)) // not an integer
		}
		res := make([]window.Result, counters)
		allowed, err := parseRequest(vals, &take{reqs: make([]window.Counter, counters)}, res)
		if err != nil {
			return
		}
		if len(vals) != replySize(true, counters) && len(vals) != replySize(false, counters) {
			t.Fatalf("accepted %d values for %d counters", len(vals), counters)
		}
		if allowed != (vals[0] == any(int64(1))) {
			t.Fatalf("allowed %v from status %v", allowed, vals[0])
		}
		for i, r := range res {
			if short := len(vals) == replySize(true, counters); short && allowed && (r.Over || r.Count < 1) {
				t.Fatalf("counter %d: %+v from an allowed short-form reply %v (want counted, not over)", i, r, vals)
			}
			if r.Count > 1<<63-1 || r.Previous > 1<<63-1 {
				t.Fatalf("counter %d: %+v from a negative value in %v", i, r, vals)
			}
		}
	})
}

// FuzzParseBucketLogReply feeds the parser full-form replies for counters
// of a TokenBucket (alg even) or SlidingLog (alg odd) of any limit and
// size: it must never panic, and what it accepts must be a Result the
// memory store could make: Retry only when Over, a bucket's Count the
// tokens its Empty takes, a log's times within the longest window.
func FuzzParseBucketLogReply(f *testing.F) {
	le := func(vs ...int64) []byte {
		var b []byte
		for _, v := range vs {
			for i := range 8 {
				b = append(b, byte(v>>(8*i)))
			}
		}
		return b
	}
	f.Add(uint8(0), uint64(10), int64(1000), le(1, 250_000_000, 0, 0))             // bucket allowed, 2.5 tokens taken
	f.Add(uint8(0), uint64(10), int64(1000), le(0, 1_000_000_000, 100_000_000, 1)) // bucket over, retry 100 ms
	f.Add(uint8(0), uint64(0), int64(1000), le(0, 0, 0, 1))                        // limit 0
	f.Add(uint8(0), uint64(3), int64(1000), le(1, 5, 0, 0, 7, 0, 0))               // two buckets
	f.Add(uint8(0), uint64(1), int64(1), le(1, 1<<53, 1<<53, 1))                   // at MaxBucketSpan
	f.Add(uint8(1), uint64(10), int64(60_000), le(1, 3, 59_000, 0))                // log allowed
	f.Add(uint8(1), uint64(3), int64(60_000), le(0, 3, 59_000, 1+20_000))          // log over, retry 20 s
	f.Add(uint8(1), uint64(3), int64(60_000), le(0, 0, 0, 1))                      // empty log over (limit 0)
	f.Add(uint8(1), uint64(3), int64(60_000), le(1, 0, 5, 0))                      // empty but with a time: refused
	f.Add(uint8(1), uint64(3), int64(60_000), le(1, 1, 1, 0, 2, 2, 0, 3, 3, 0, 4)) // too many values
	f.Fuzz(func(t *testing.T, alg uint8, limit uint64, sizeMs int64, raw []byte) {
		a := window.TokenBucket
		if alg%2 == 1 {
			a = window.SlidingLog
		}
		if sizeMs <= 0 || sizeMs > maxLogMs {
			sizeMs = 1 + (sizeMs&0x7fffffffffff)%maxLogMs
		}
		var vals []any
		for len(raw) >= 8 {
			var v int64
			for i := range 8 {
				v |= int64(raw[i]) << (8 * i)
			}
			vals = append(vals, v)
			raw = raw[8:]
		}
		if len(raw) > 0 {
			vals = append(vals, string(raw))
		}
		counters := max(1, (len(vals)-1)/3)
		reqs := make([]window.Counter, counters)
		for i := range reqs {
			reqs[i] = window.Counter{Key: "k", Limit: limit, Size: time.Duration(sizeMs) * time.Millisecond, Algorithm: a}
		}
		res := make([]window.Result, counters)
		allowed, err := parseRequest(vals, &take{reqs: reqs}, res)
		if err != nil {
			return
		}
		if allowed != (vals[0] == any(int64(1))) {
			t.Fatalf("allowed %v from status %v", allowed, vals[0])
		}
		for i, r := range res {
			n := vals[1+3*i : 4+3*i]
			if r.Empty < 0 || r.Retry < 0 || !r.Over && r.Retry != 0 || r.Previous != 0 || r.Skipped {
				t.Fatalf("counter %d: %+v from %v", i, r, n)
			}
			if a == window.TokenBucket {
				iv := reqs[i].Interval()
				if want := uint64(0); iv > 0 && r.Count != uint64((r.Empty+iv-1)/iv) || iv == 0 && r.Count != want {
					t.Fatalf("bucket %d: Count %d for Empty %v and interval %v", i, r.Count, r.Empty, iv)
				}
				if r.Over != (n[2] == any(int64(1))) || r.Empty != time.Duration(n[0].(int64)) {
					t.Fatalf("bucket %d: %+v from %v", i, r, n)
				}
				continue
			}
			if r.Empty > window.MaxSize || r.Retry > window.MaxSize || r.Count == 0 && r.Empty != 0 || r.Count != uint64(n[0].(int64)) {
				t.Fatalf("log %d: %+v from %v", i, r, n)
			}
		}
	})
}
