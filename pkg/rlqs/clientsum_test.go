package rlqs

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestScanKeepsExactSums: over random Sets, Deletes and DeleteExpireds at
// a clock that moves on (and now and then back), scan from the kept sums
// equals scanEvery, which reads every entry, for every entry as self and
// for a new client; the sums are kept (not all taken again) for most scans.
func TestScanKeepsExactSums(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 2))
			ms := func(n int) time.Duration { return time.Duration(rng.IntN(n)) * time.Millisecond }
			var cs Clients
			now := t0
			kept, scans := 0, 0
			for range 600 {
				switch op := rng.IntN(20); {
				case op < 12:
					// Mostly a TTL on, as a ledger sets it; now and then
					// about to lapse, or lapsed (a kept state).
					expires := now.Add(5*time.Second + ms(11000))
					if rng.IntN(10) == 0 {
						expires = now.Add(ms(2000) - 500*time.Millisecond)
					}
					c := ClientState{Demand: rng.Uint64N(1000), Rate: rng.Uint64N(1000), Burst: rng.Uint64N(50),
						Estimated: rng.IntN(5) == 0, Expires: expires}
					if rng.IntN(3) == 0 {
						c.PrevRate, c.PrevBurst = c.Rate+rng.Uint64N(500), c.Burst+rng.Uint64N(20)
						c.PrevUntil = now.Add(ms(1500) - 300*time.Millisecond)
					}
					if rng.IntN(50) == 0 {
						c.Rate = math.MaxUint64 - rng.Uint64N(3) // saturates the sums
					}
					cs.Set(fmt.Sprint("c", rng.IntN(60)), c)
				case op < 16:
					cs.Delete(fmt.Sprint("c", rng.IntN(60)))
				case op < 18:
					cs.DeleteExpired(now)
				case op < 19:
					now = now.Add(ms(500))
					if rng.IntN(4) != 0 {
						cs.DeleteExpired(now) // a ledger drops what a division finds expired
					}
				default:
					now = now.Add(-ms(100)) // Redis's clock, read by another replica, may be behind
				}
				for self := -1; self < cs.Len(); self++ {
					ok := cs.sum.ok && !now.Before(cs.sum.at) && now.Before(cs.sum.lapseBound) && !cs.sum.lapsed
					got, want := scan(now, &cs, self), scanEvery(now, &cs, self)
					slices.Sort(got.expired)
					slices.Sort(want.expired)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("at %v, self %d: scan = %+v, reading every entry %+v", now.Sub(t0), self, got, want)
					}
					scans++
					if ok {
						kept++
					}
				}
			}
			if kept*2 < scans {
				t.Errorf("the sums were kept for %d of %d scans, want most", kept, scans)
			}
		})
	}
}

// TestClientsTimes: the first lapse and the last end of a decrease in
// flight among the unexpired entries but self.
func TestClientsTimes(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var cs Clients
	cs.Set("a", ClientState{Expires: at(10 * time.Second), PrevUntil: at(time.Second)})
	cs.Set("b", ClientState{Expires: at(5 * time.Second), PrevUntil: at(500 * time.Millisecond)})
	cs.Set("c", ClientState{Expires: at(-time.Second), PrevUntil: at(2 * time.Second)}) // expired: left out
	cs.Set("d", ClientState{Expires: at(7 * time.Second), PrevUntil: at(-time.Second)}) // no decrease in flight
	for _, tc := range []struct {
		self             string
		lapse, freedLast time.Time
	}{
		{"", at(5 * time.Second), at(time.Second)},
		{"a", at(5 * time.Second), at(500 * time.Millisecond)},
		{"b", at(7 * time.Second), at(time.Second)},
	} {
		self, _ := cs.Lookup(tc.self)
		if lapse, freed := cs.times(t0, self); !lapse.Equal(tc.lapse) || !freed.Equal(tc.freedLast) {
			t.Errorf("self %q: times = %v, %v; want %v, %v", tc.self, lapse.Sub(t0), freed.Sub(t0), tc.lapse.Sub(t0), tc.freedLast.Sub(t0))
		}
	}
}
