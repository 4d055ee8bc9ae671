package envoyrlqs

import (
	"errors"
	"math"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newBucket(t *testing.T, s Settings) *Bucket {
	t.Helper()
	b, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// admitted counts the requests admitted out of n sent evenly over [from, to).
func admitted(b *Bucket, from, to time.Duration, n int) int {
	ok := 0
	for i := range n {
		if b.Decide(at(from + (to-from)*time.Duration(i)/time.Duration(n))) {
			ok++
		}
	}
	return ok
}

func TestFirstRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		s     Settings
		allow bool
	}{
		{"unset allows", Settings{}, true},
		{"ALLOW_ALL allows", Settings{NoAssignment: Blanket(typev3.RateLimitStrategy_ALLOW_ALL)}, true},
		{"DENY_ALL denies", Settings{NoAssignment: Blanket(typev3.RateLimitStrategy_DENY_ALL)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBucket(t, tc.s)
			if _, ok := b.Usage(at(0)); ok {
				t.Fatal("Usage before the first request reports the bucket")
			}
			if got := b.Decide(at(0)); got != tc.allow {
				t.Fatalf("first Decide = %v, want %v", got, tc.allow)
			}
			u, ok := b.Subscription()
			want := Usage{Allowed: 1}
			if !tc.allow {
				want = Usage{Denied: 1}
			}
			if !ok || u != want {
				t.Fatalf("Subscription() = %+v, %v, want %+v, true", u, ok, want)
			}
			if _, ok := b.Subscription(); ok {
				t.Fatal("second Subscription() = true, want false")
			}
			// Until an assignment comes, every request gets the same answer.
			if got := admitted(b, time.Second, 2*time.Second, 10); got != map[bool]int{true: 10, false: 0}[tc.allow] {
				t.Fatalf("admitted %d of 10 before any assignment", got)
			}
		})
	}
}

func TestDefaultTokenBucketRefused(t *testing.T) {
	t.Parallel()
	if _, err := New(Settings{NoAssignment: TokenBucket(1, 1, time.Second)}); !errors.Is(err, ErrDefaultTokenBucket) {
		t.Fatalf("New(token bucket default) = %v, want ErrDefaultTokenBucket", err)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	b := newBucket(t, Settings{})
	b.Decide(at(0))
	b.Subscription()
	b.Apply(at(100*time.Millisecond), Assign(TokenBucket(5, 1, time.Second), time.Minute))
	admitted(b, time.Second, 2*time.Second, 20) // 5 + about 1 refilled
	u, _ := b.Usage(at(5900 * time.Millisecond))
	if u.Elapsed != 5*time.Second {
		t.Errorf("Elapsed = %v, want 5s (truncated)", u.Elapsed)
	}
	if u.Allowed+u.Denied != 20 || u.Allowed < 5 || u.Allowed > 7 {
		t.Errorf("Usage = %+v, want 20 requests of which 5 to 7 allowed", u)
	}
	u, _ = b.Usage(at(6 * time.Second))
	if u != (Usage{}) {
		t.Errorf("Usage after a report = %+v, want zero counts and Elapsed 0", u)
	}
}

func TestTokenBucketRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		s        *typev3.RateLimitStrategy
		min, max int // admitted of 1000 requests over 10 s
	}{
		// 10 tokens per 2 s: 5/s, a full bucket of 10 at the start.
		{"whole seconds", TokenBucket(10, 10, 2*time.Second), 59, 60},
		// 1.5 s counts as 1 s: 10 per second, not 6.7.
		{"fraction truncated", TokenBucket(10, 10, 1500*time.Millisecond), 109, 110},
		// Sub-second: divides by zero and admits everything.
		{"sub-second admits all", TokenBucket(10, 10, 666*time.Millisecond), 1000, 1000},
		// tokens_per_fill 0 is not "1": the rate is Envoy's floor.
		{"zero per fill", TokenBucket(3, 0, time.Second), 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBucket(t, Settings{})
			b.Decide(at(0))
			b.Apply(at(0), Assign(tc.s, time.Hour))
			got := admitted(b, time.Nanosecond, 10*time.Second+time.Nanosecond, 1000)
			if got < tc.min || got > tc.max {
				t.Fatalf("admitted %d of 1000 over 10 s, want %d..%d", got, tc.min, tc.max)
			}
		})
	}
}

func TestReplace(t *testing.T) {
	t.Parallel()
	const ttl = time.Minute
	for _, tc := range []struct {
		name      string
		next      *typev3.RateLimitStrategy
		wantToken float64 // tokens right after the second assignment
		replaced  int
		floored   float64 // tokens the replacement lost
	}{
		// Same strategy: the running bucket (2 of 10 left) carries over.
		{"same extends", TokenBucket(10, 1, time.Minute), 2, 1, 0},
		// Only the seconds of fill_interval differ: Envoy sees no change.
		{"seconds ignored", TokenBucket(10, 1, 10*time.Second), 2, 1, 0},
		// Nanos differ: a new bucket at the old fill ratio, 20% of 20.
		{"nanos compared", TokenBucket(20, 1, time.Minute+time.Nanosecond), 4, 2, 0},
		// Fewer tokens: the fill ratio is kept, floor(0.2 × 7) = 1, and
		// the 2 held less 1 are lost.
		{"ratio floored", TokenBucket(7, 2, time.Minute), 1, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBucket(t, Settings{})
			b.Decide(at(0))
			b.Apply(at(0), Assign(TokenBucket(10, 1, time.Minute), ttl))
			// Take 8 of 10 within a millisecond (refill 1/60 per second).
			if got := admitted(b, time.Microsecond, time.Millisecond, 8); got != 8 {
				t.Fatalf("admitted %d of 8 from a full bucket of 10", got)
			}
			b.Apply(at(time.Millisecond), Assign(tc.next, ttl))
			got, ok := b.Tokens(at(time.Millisecond))
			if !ok || math.Abs(got-tc.wantToken) > 0.01 {
				t.Fatalf("Tokens = %v, %v, want %v", got, ok, tc.wantToken)
			}
			if s := b.Stats(); s.Replaced != tc.replaced || math.Abs(s.Floored-tc.floored) > 0.01 {
				t.Fatalf("Replaced = %d, Floored = %v; want %d, %v", s.Replaced, s.Floored, tc.replaced, tc.floored)
			}
		})
	}
}

func TestNewBucketFull(t *testing.T) {
	t.Parallel()
	b := newBucket(t, Settings{})
	b.Decide(at(0))
	b.Apply(at(0), Assign(Blanket(typev3.RateLimitStrategy_DENY_ALL), time.Minute))
	b.Apply(at(time.Second), Assign(TokenBucket(30, 1, time.Minute), time.Minute))
	if got, _ := b.Tokens(at(time.Second)); got != 30 {
		t.Fatalf("Tokens after a token bucket replaced a blanket rule = %v, want 30 (full)", got)
	}
	if s := b.Stats(); s.Injected != 30 {
		t.Fatalf("Injected = %v, want 30", s.Injected)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	deny := Blanket(typev3.RateLimitStrategy_DENY_ALL)
	allow := Blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	for _, tc := range []struct {
		name string
		s    Settings
		ttl  time.Duration
		// what a request at each time gets
		checks map[time.Duration]bool
	}{
		{
			// 5.9 s of TTL is 5 s: at 5 s the assignment (DENY_ALL) is gone
			// and no_assignment_behavior (unset: ALLOW_ALL) decides.
			name: "ttl whole seconds then no assignment", s: Settings{}, ttl: 5900 * time.Millisecond,
			checks: map[time.Duration]bool{4999 * time.Millisecond: false, 5 * time.Second: true},
		},
		{
			name: "expired fallback then no assignment",
			s:    Settings{NoAssignment: deny, Expired: allow, ExpiredTimeout: 3 * time.Second},
			ttl:  5 * time.Second,
			checks: map[time.Duration]bool{
				4 * time.Second: false, 5 * time.Second: true, 7 * time.Second: true, 8 * time.Second: false,
			},
		},
		{
			name:   "fallback timeout 0 ends at once",
			s:      Settings{NoAssignment: deny, Expired: allow},
			ttl:    5 * time.Second,
			checks: map[time.Duration]bool{5 * time.Second: false},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for when, want := range tc.checks {
				b := newBucket(t, tc.s)
				b.Decide(at(0))
				b.Apply(at(0), Assign(deny, tc.ttl))
				if got := b.Decide(at(when)); got != want {
					t.Errorf("Decide at %v = %v, want %v", when, got, want)
				}
			}
		})
	}
}

func TestExpiredTokenBucketFallback(t *testing.T) {
	t.Parallel()
	// The fallback token bucket replaces the expired one at its fill ratio.
	b := newBucket(t, Settings{Expired: TokenBucket(4, 1, time.Hour), ExpiredTimeout: time.Hour})
	b.Decide(at(0))
	b.Apply(at(0), Assign(TokenBucket(10, 1, time.Hour), 5*time.Second))
	admitted(b, time.Millisecond, 2*time.Millisecond, 5) // 5 of 10 left
	if got, _ := b.Tokens(at(5 * time.Second)); math.Abs(got-2) > 0.01 {
		t.Fatalf("Tokens after expiry = %v, want 2 (half of 4)", got)
	}
}

func TestAssignmentKeepsTTLFresh(t *testing.T) {
	t.Parallel()
	// The same strategy again restarts the TTL timer.
	b := newBucket(t, Settings{})
	b.Decide(at(0))
	deny := Blanket(typev3.RateLimitStrategy_DENY_ALL)
	b.Apply(at(0), Assign(deny, 5*time.Second))
	b.Apply(at(4*time.Second), Assign(deny, 5*time.Second))
	if b.Decide(at(8 * time.Second)) {
		t.Fatal("a request at 8 s was admitted; the TTL restarted at 4 s should hold DENY_ALL until 9 s")
	}
	if !b.Decide(at(9 * time.Second)) {
		t.Fatal("a request at 9 s was denied after the TTL ran out")
	}
}

func TestAbandonAndUnsupported(t *testing.T) {
	t.Parallel()
	b := newBucket(t, Settings{})
	b.Decide(at(0))
	b.Subscription()
	deny := Blanket(typev3.RateLimitStrategy_DENY_ALL)
	b.Apply(at(0), Assign(deny, time.Minute))
	// requests_per_time_unit is skipped: DENY_ALL stays.
	b.Apply(at(time.Second), Assign(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 1},
	}}, time.Minute))
	if b.Decide(at(2 * time.Second)) {
		t.Fatal("requests_per_time_unit replaced DENY_ALL")
	}
	b.Apply(at(3*time.Second), Abandon())
	if _, ok := b.Usage(at(4 * time.Second)); ok {
		t.Fatal("an abandoned bucket is still reported")
	}
	if !b.Decide(at(4 * time.Second)) {
		t.Fatal("the first request after abandon_action was denied")
	}
	if _, ok := b.Subscription(); !ok {
		t.Fatal("the first request after abandon_action sent no immediate report")
	}
}
