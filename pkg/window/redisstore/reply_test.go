package redisstore

import (
	"testing"

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
		allowed, err := parseRequest(vals, res)
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
