package window

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

func TestEncodePicksShortFormOnlyForPlainCounters(t *testing.T) {
	t.Parallel()
	base := Request{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1}
	tests := []struct {
		name   string
		reqs   []Request
		refund bool
		short  bool
	}{
		{"one fixed counter", []Request{base}, false, true},
		{"hits above one", []Request{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 3}}, false, true},
		{"two counters", []Request{base, base}, false, false},
		{"shadow", []Request{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Shadow: true}}, false, false},
		{"refund request", []Request{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Refund: true}}, false, false},
		{"undo of a take", []Request{base}, true, false},
		{"check only (hits 0)", []Request{{Key: "t:{k}", Limit: 5, Size: time.Minute}}, false, false},
		{"sliding window", []Request{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Algorithm: SlidingWindow}}, false, false},
	}
	for _, tt := range tests {
		if got := shortCall(tt.reqs, nil, tt.refund); got != tt.short {
			t.Errorf("%s: short form %v, want %v", tt.name, got, tt.short)
		}
		args := appendArgs(nil, 1_763_800_035_000, tt.reqs, nil, tt.refund)
		if got := args[0] == shortForm; got != tt.short {
			t.Errorf("%s: arguments %v: short form %v, want %v", tt.name, args, got, tt.short)
		}
	}
}

// TestShortFormDecidesAsTheFullForm runs the same request against the same
// counter state in both of the script's forms, on a real Redis, and wants the
// same decision, the same Result and the same counter afterwards.
func TestShortFormDecidesAsTheFullForm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := NewRedis(client, RedisOptions{})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_763_800_035_000)
	w := At(now, time.Minute)
	for i, tt := range []struct {
		before string // "" for a missing counter
		hits   uint64
	}{
		{"", 1}, {"", 5}, {"", 6}, {"3", 1}, {"3", 2}, {"3", 3}, {"5", 1}, {"9", 1}, {"x", 1},
	} {
		var results [2]struct {
			allowed bool
			err     error
			res     Result
			after   string
			ttl     time.Duration
		}
		for form := range 2 {
			key := fmt.Sprintf("t:{%d-%d}", i, form)
			full := string(AppendWindow([]byte(key), w))
			if tt.before != "" {
				if err := client.Set(ctx, full, tt.before, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r := Request{Key: key, Limit: 5, Size: time.Minute, Hits: tt.hits}
			args, _ := appendCall(nil, nil, now.UnixMilli(), []Request{r}, nil, false)
			if form == 1 { // the same request in the full form: n = 1, flags 0, weight 0
				args = append(args[:4], 1, r.Limit, r.Hits, r.ttl(), 0, 0)
			}
			got := &results[form]
			res := make([]Result, 1)
			v, err := s.script(ctx, args)
			if err == nil {
				got.allowed, got.err = parseTake(v, res)
			} else {
				got.err = err
			}
			got.res = res[0]
			got.after, _ = client.Get(ctx, full).Result()
			got.ttl = client.TTL(ctx, full).Val().Round(time.Minute)
		}
		short, full := results[0], results[1]
		if (short.err != nil) != (full.err != nil) || short.allowed != full.allowed || short.res != full.res ||
			short.after != full.after || short.ttl != full.ttl {
			t.Errorf("before %q hits %d: short form %+v, full form %+v", tt.before, tt.hits, short, full)
		}
	}
}

func TestCallDeadline(t *testing.T) {
	t.Parallel()
	start := time.UnixMilli(1_763_800_035_000)
	for _, tt := range []struct {
		name     string
		ctxLeft  time.Duration // 0: no deadline
		timeout  time.Duration
		wantLeft time.Duration
	}{
		{"no deadline: the timeout", 0, 15 * time.Millisecond, 15 * time.Millisecond},
		{"a far deadline: the timeout", time.Second, 15 * time.Millisecond, 15 * time.Millisecond},
		{"a near deadline: nine tenths of it", 10 * time.Millisecond, 15 * time.Millisecond, 9 * time.Millisecond},
		{"Envoy's 20ms: nine tenths", 20 * time.Millisecond, time.Second, 18 * time.Millisecond},
		{"a deadline already passed", -time.Millisecond, 15 * time.Millisecond, -900 * time.Microsecond},
	} {
		ctx := context.Background()
		if tt.ctxLeft != 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, start.Add(tt.ctxLeft))
			defer cancel()
		}
		if got := callDeadline(ctx, start, tt.timeout).Sub(start); got != tt.wantLeft {
			t.Errorf("%s: deadline %v after start, want %v", tt.name, got, tt.wantLeft)
		}
	}
}
