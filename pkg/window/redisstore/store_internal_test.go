package redisstore

import (
	"context"
	"testing"
	"time"
)

func TestCallDeadline(t *testing.T) {
	t.Parallel()
	start := time.UnixMilli(1_763_800_035_000)
	for _, tt := range []struct {
		name       string
		ctxLeft    time.Duration // 0: no deadline
		timeout    time.Duration
		maxTimeout time.Duration
		wantLeft   time.Duration
	}{
		{"no deadline: the timeout", 0, 15 * time.Millisecond, 0, 15 * time.Millisecond},
		{"no deadline, capped", 0, time.Second, 15 * time.Millisecond, 15 * time.Millisecond},
		{"a far deadline: nine tenths of it, past the timeout", time.Second, 15 * time.Millisecond, 0, 900 * time.Millisecond},
		{"100ms: nine tenths", 100 * time.Millisecond, 15 * time.Millisecond, 0, 90 * time.Millisecond},
		{"40ms: 5ms kept, more than a tenth", 40 * time.Millisecond, 15 * time.Millisecond, 0, 35 * time.Millisecond},
		{"a far deadline, capped", time.Second, 15 * time.Millisecond, 15 * time.Millisecond, 15 * time.Millisecond},
		{"a near deadline: a quarter kept", 10 * time.Millisecond, 15 * time.Millisecond, 0, 7500 * time.Microsecond},
		{"a near deadline under the cap", 10 * time.Millisecond, 15 * time.Millisecond, 15 * time.Millisecond, 7500 * time.Microsecond},
		{"Envoy's 20ms: 5ms kept", 20 * time.Millisecond, time.Second, 0, 15 * time.Millisecond},
		{"AI Gateway's 5s: nine tenths", 5 * time.Second, 15 * time.Millisecond, 0, 4500 * time.Millisecond},
		{"the reference's REDIS_TIMEOUT caps AI Gateway's 5s", 5 * time.Second, 10 * time.Second, 10 * time.Second, 4500 * time.Millisecond},
		{"a deadline already passed", -time.Millisecond, 15 * time.Millisecond, 0, -900 * time.Microsecond},
	} {
		ctx := context.Background()
		if tt.ctxLeft != 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, start.Add(tt.ctxLeft))
			defer cancel()
		}
		if got := takeDeadline(ctx, start, tt.timeout, tt.maxTimeout).Sub(start); got != tt.wantLeft {
			t.Errorf("%s: deadline %v after start, want %v", tt.name, got, tt.wantLeft)
		}
	}
}
