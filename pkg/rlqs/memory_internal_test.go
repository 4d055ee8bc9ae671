package rlqs

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Buckets no one reports any more are swept, so the memory ledger does not
// grow with every bucket ever seen.
func TestMemorySweep(t *testing.T) {
	t.Parallel()
	m := NewMemory(Policy{})
	f := Fleet{Tokens: 1, Period: time.Second, Burst: 1}
	ctx := context.Background()
	for i := range sweepEvery - 1 {
		if _, err := AssignOne(ctx, m, t0, fmt.Sprint(i), f, Report{Client: "a"}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(m.buckets); got != sweepEvery-1 {
		t.Fatalf("%d buckets, want %d", got, sweepEvery-1)
	}
	// The next call sweeps: every share above has expired an hour later.
	if _, err := AssignOne(ctx, m, t0.Add(time.Hour), "new", f, Report{Client: "a"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := len(m.buckets); got != 1 {
		t.Fatalf("%d buckets after the sweep, want 1 (the new one)", got)
	}
}
