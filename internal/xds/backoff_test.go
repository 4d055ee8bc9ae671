package xds

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := Backoff{Initial: time.Second, Max: 10 * time.Second, RandomFactor: 0.5}.withDefaults()
	tests := []struct {
		attempt int
		r       float64
		jitter  bool
		want    time.Duration
	}{
		{0, 0.5, false, time.Second},
		{1, 0.5, false, 2 * time.Second},
		{3, 0.5, false, 8 * time.Second},
		{4, 0.5, false, 10 * time.Second},
		{1000, 0.5, false, 10 * time.Second},
		{0, 0, true, 500 * time.Millisecond},
		{0, 0.5, true, time.Second},
		{1, 0.75, true, 2500 * time.Millisecond},
		{10, 0.99, true, 10 * time.Second}, // jitter never passes Max
	}
	for _, tt := range tests {
		b := b
		b.Jitter = tt.jitter
		if got := b.delay(tt.attempt, tt.r); got != tt.want {
			t.Errorf("delay(%d, %v) jitter %v = %v, want %v", tt.attempt, tt.r, tt.jitter, got, tt.want)
		}
	}
}

func TestBackoffDefaults(t *testing.T) {
	t.Parallel()
	got := Backoff{}.withDefaults()
	if want := (Backoff{Initial: 10 * time.Second, Max: time.Minute, RandomFactor: 0.5}); got != want {
		t.Errorf("Backoff{}.withDefaults() = %+v, want %+v", got, want)
	}
	if got := (Backoff{Initial: time.Minute, Max: time.Second}).withDefaults(); got.Max != time.Minute {
		t.Errorf("Max below Initial: Max = %v, want Initial", got.Max)
	}
}
