package storetest

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// GuaranteeRequests are the counters the guarantee tests drive: buckets
// with and without a burst of their own, with an interval rounded up, and
// logs of a few sizes.
func GuaranteeRequests() []window.Counter {
	return []window.Counter{
		{Key: "g:{b}!token_bucket", Limit: 10, Size: time.Second, Algorithm: window.TokenBucket},
		{Key: "g:{b}!1,token_bucket", Limit: 7, Burst: 20, Size: 3 * time.Second, Algorithm: window.TokenBucket},
		{Key: "g:{b}!2,token_bucket", Limit: 50, Burst: 1, Size: time.Minute, Algorithm: window.TokenBucket},
		{Key: "g:{b}!3,sliding_log", Limit: 10, Size: time.Second, Algorithm: window.SlidingLog},
		{Key: "g:{b}!4,sliding_log", Limit: 3, Size: 5 * time.Second, Algorithm: window.SlidingLog},
	}
}

// Admission is one request a store allowed: its time and hits.
type Admission struct {
	At   time.Time
	Hits uint64
}

// Guarantee drives the one counter of r (a TokenBucket or SlidingLog
// request; its Hits are ignored) through stores, replicas sharing one
// state, with n random arrivals from an injected clock that starts at T0:
// each after a random pause of up to twice the counter's mean spacing at
// its rate (some at the same millisecond), through a random store, taking
// 1 to Capacity()+1 hits (mostly 1). It fails the test when a store
// breaks its algorithm's guarantee (see CheckAdmissions) or a denied
// request consumed anything: a check (Hits 0) right after a denial must
// find the counter as the denial reported it, or when the arrivals were
// all admitted or all denied. It returns the admissions.
func Guarantee[S window.Store](t testing.TB, seed uint64, n int, r window.Counter, stores ...S) []Admission {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	spacing := int64(1)
	if r.Limit > 0 {
		spacing = max(1, r.Size.Milliseconds()/int64(r.Limit))
	}
	capacity := r.Capacity()
	now := T0
	var admitted []Admission
	res := make([]window.Result, 1)
	for i := range n {
		now = now.Add(time.Duration(rng.Int64N(2*spacing+1)) * time.Millisecond)
		q := r
		q.Hits = 1
		if rng.IntN(4) == 0 {
			q.Hits = 1 + rng.Uint64N(capacity+1)
		}
		s := stores[rng.IntN(len(stores))]
		ok, err := s.Take(ctx, now, []window.Counter{q}, res)
		if err != nil {
			t.Fatalf("arrival %d: Take: %v", i, err)
		}
		if ok != !res[0].Over {
			t.Fatalf("arrival %d: allowed %v with %+v", i, ok, res[0])
		}
		if ok {
			admitted = append(admitted, Admission{At: now, Hits: q.Hits})
			continue
		}
		denied := res[0]
		q.Hits = 0
		if _, err := stores[rng.IntN(len(stores))].Take(ctx, now, []window.Counter{q}, res); err != nil {
			t.Fatalf("arrival %d: check: %v", i, err)
		}
		if res[0].Count != denied.Count || res[0].Empty != denied.Empty {
			t.Fatalf("arrival %d at %v: a denial (%+v) consumed: a check then found %+v", i, now.Sub(T0), denied, res[0])
		}
	}
	if len(admitted) == 0 || len(admitted) == n {
		// A store that denies (or admits) everything would pass the
		// checks above untested.
		t.Fatalf("%d of %d arrivals admitted: the traffic must reach both answers", len(admitted), n)
	}
	CheckAdmissions(t, r, admitted)
	return admitted
}

// CheckAdmissions fails the test when admitted (in time order) break r's
// guarantee: for TokenBucket, over every interval [a, b] at most
// Burst + Limit x (b-a) / Size hits, for SlidingLog in every window of
// length Size (a time t and those of the Size before it, exclusive) at most
// Limit hits. It checks every interval that starts and ends on an
// admission, which covers all: any other holds no more hits and is no
// shorter.
func CheckAdmissions(t testing.TB, r window.Counter, admitted []Admission) {
	t.Helper()
	size := uint64(r.Size)
	for j := range admitted {
		var sum uint64
	earlier:
		for i := j; i >= 0; i-- {
			span := admitted[j].At.Sub(admitted[i].At)
			sum += admitted[i].Hits
			switch r.Algorithm {
			case window.TokenBucket:
				// sum*Size <= Burst*Size + Limit*span, in 128 bits.
				if less128(mul128(r.Limit, uint64(span)).add(mul128(r.Capacity(), size)), mul128(sum, size)) {
					t.Fatalf("token bucket admitted %d hits in [%v, %v] (%v), more than burst %d + %d per %v",
						sum, admitted[i].At.Sub(T0), admitted[j].At.Sub(T0), span, r.Capacity(), r.Limit, r.Size)
				}
			case window.SlidingLog:
				if span >= r.Size {
					break earlier // out of every window ending at admitted[j], as are all before it
				}
				if sum > r.Limit {
					t.Fatalf("sliding log admitted %d hits in (%v, %v], more than %d per %v",
						sum, admitted[j].At.Sub(T0)-r.Size, admitted[j].At.Sub(T0), r.Limit, r.Size)
				}
			default:
				t.Fatalf("CheckAdmissions: %v has no guarantee", r.Algorithm)
			}
		}
	}
}

// u128 is an unsigned 128-bit integer, hi and lo.
type u128 struct{ hi, lo uint64 }

func mul128(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (a u128) add(b u128) u128 {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, carry)
	return u128{hi, lo}
}

func less128(a, b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }
