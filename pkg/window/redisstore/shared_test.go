package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestSharedKeys: a call lists, first among its keys, each key that
// several counters use, with the hits its counting counters plan (refunds
// and previous windows plan none), whether the batch has few keys or more
// than add scans; a key used once is not listed; the next call starts
// afresh.
func TestSharedKeys(t *testing.T) {
	t.Parallel()
	const nowMs = 1_763_800_035_000
	plain := func(key string, hits uint64) window.Counter {
		return window.Counter{Key: "t:{" + key + "}", Limit: 100, Size: time.Minute, Hits: hits}
	}
	full := func(key string) string {
		return string(window.AppendWindow([]byte("t:{"+key+"}"), window.AtMillis(nowMs, time.Minute.Milliseconds())))
	}
	refund := plain("hot", 4)
	refund.Refund = true
	sliding := plain("slide", 1)
	sliding.Algorithm = window.SlidingWindow
	tests := []struct {
		name    string
		calls   [][]window.Counter
		keys    []string // the shared keys, in order
		planned []uint64
	}{
		{"none repeated", [][]window.Counter{{plain("a", 1)}, {plain("b", 1)}}, nil, nil},
		{"a hot key among others", [][]window.Counter{
			{plain("hot", 2)}, {plain("a", 1), plain("hot", 3)}, {refund}, {plain("b", 1)}, {plain("hot", 1)},
		}, []string{full("hot")}, []uint64{6}},
		{"two hot keys", [][]window.Counter{
			{plain("x", 1)}, {plain("y", 1)}, {plain("y", 1)}, {plain("x", 1)}, {plain("x", 1)},
		}, []string{full("x"), full("y")}, []uint64{3, 2}},
		{"the same counter twice in a request", [][]window.Counter{{plain("a", 1), plain("a", 2)}}, []string{full("a")}, []uint64{3}},
		{"a sliding window's keys", [][]window.Counter{{sliding}, {sliding}}, func() []string {
			w := window.AtMillis(nowMs, time.Minute.Milliseconds())
			return []string{full("slide"), string(window.AppendWindow([]byte("t:{slide}"), w.Previous()))}
		}(), []uint64{2, 0}},
	}
	// Many keys: past what add scans, the index finds them.
	var many []window.Counter
	var manyKeys []string
	var manyPlanned []uint64
	for i := range 3 * sharedScanned {
		many = append(many, plain(fmt.Sprint(i), 1))
	}
	for i := range 3 * sharedScanned {
		if i%2 == 0 {
			many = append(many, plain(fmt.Sprint(i), 2))
			manyKeys, manyPlanned = append(manyKeys, full(fmt.Sprint(i))), append(manyPlanned, 3)
		}
	}
	tests = append(tests, struct {
		name    string
		calls   [][]window.Counter
		keys    []string
		planned []uint64
	}{"more keys than scanned", [][]window.Counter{many}, manyKeys, manyPlanned})

	var b callBuf
	for round := range 2 { // the second round reuses b's memory
		for _, tt := range tests {
			rs := make([]take, len(tt.calls))
			counters := 0
			for i, reqs := range tt.calls {
				rs[i] = newTake(nowMs, reqs, nil)
				for _, r := range reqs {
					counters++
					if r.Algorithm == window.SlidingWindow {
						counters++
					}
				}
			}
			args := b.build(rs)
			nkeys := args[2].(int)
			head := 3 + nkeys
			shared := args[head+1].(int)
			var keys []string
			for _, k := range args[3 : 3+shared] {
				keys = append(keys, string(keyOf(k)))
			}
			var planned []uint64
			for _, p := range args[len(args)-shared:] {
				planned = append(planned, p.(uint64))
			}
			if nkeys != counters+shared || fmt.Sprint(keys) != fmt.Sprint(tt.keys) || fmt.Sprint(planned) != fmt.Sprint(tt.planned) {
				t.Errorf("round %d, %s: %d keys, shared %q planning %v; want %d keys, shared %q planning %v",
					round, tt.name, nkeys, keys, planned, counters+len(tt.keys), tt.keys, tt.planned)
			}
			b.release()
		}
	}
}
