package ledgertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// step is one Assign of a Table case and the share it must return.
type step struct {
	at   time.Duration
	key  string
	f    rlqs.Fleet
	r    rlqs.Report
	want rlqs.Share
}

type tableCase struct {
	name  string
	steps []step
}

var (
	tenPerSecond = rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 20}
	tableTTL     = 15 * time.Second
)

func report(client string, allowed, denied uint64, elapsed time.Duration) rlqs.Report {
	return rlqs.Report{Client: client, Allowed: allowed, Denied: denied, Elapsed: elapsed}
}

// ps is a rate of one token a second.
const ps = rlqs.PerSecond

// share is the Share of an Assign at `at` with tableTTL.
func share(at time.Duration, rate, burst uint64, changed bool) rlqs.Share {
	return rlqs.Share{Rate: rate, Burst: burst, Expires: Start.Add(at + tableTTL), Changed: changed}
}

// withRecheck is s with Recheck at `at`.
func withRecheck(s rlqs.Share, at time.Duration) rlqs.Share {
	s.Recheck = Start.Add(at)
	return s
}

func tableCases() []tableCase {
	sec := time.Second
	return []tableCase{
		{"alone: half the rate until measured, the whole once busy, then only the TTL", []step{
			{0, "k", tenPerSecond, report("a", 1, 0, 0), share(0, 5*ps, 10, true)},
			{5 * sec, "k", tenPerSecond, report("a", 30, 20, 5*sec), share(5*sec, 10*ps, 20, true)},
			{10 * sec, "k", tenPerSecond, report("a", 30, 20, 5*sec), share(10*sec, 10*ps, 20, false)},
		}},
		{"a second client waits for the first one's decrease", []step{
			{0, "k", tenPerSecond, report("a", 50, 50, 5*sec), share(0, 10*ps, 20, true)},
			// b is not measured: half of the free room, none. b is
			// re-checked when a's next report (due at 5 s) has been
			// answered, with the Grace.
			{100 * time.Millisecond, "k", tenPerSecond, report("b", 1, 0, 0),
				withRecheck(share(100*time.Millisecond, 0, 0, true), 6*sec)},
			// a measures 20/s; b is estimated at the average (20/s): half.
			// The old share counts until 6 s, so b is told to re-check.
			{5 * sec, "k", tenPerSecond, report("a", 50, 50, 5*sec), share(5*sec, 5*ps, 10, true)},
			{5100 * time.Millisecond, "k", tenPerSecond, report("b", 0, 25, 5*sec),
				withRecheck(share(5100*time.Millisecond, 0, 0, false), 6*sec)},
			// b's re-check: 5/s against a's 20/s: r·(5/s + φ)/(25/s + 2φ)
			// with φ = (25/s)/32 (+1) is 188047059 (2.18/s), within the
			// 5/s free.
			{6 * sec, "k", tenPerSecond, report("b", 0, 0, 0), share(6*sec, 188047059, 4, true)},
		}},
		{"an expired client frees its share", []step{
			{0, "k", tenPerSecond, report("a", 50, 50, 5*sec), share(0, 10*ps, 20, true)},
			{sec, "k", tenPerSecond, report("b", 1, 0, 0), withRecheck(share(sec, 0, 0, true), 6*sec)},
			// a's share counted until 0 + 15 s + 1 s of grace (a's report
			// due at 5 s never came).
			{15 * sec, "k", tenPerSecond, report("b", 0, 50, 5*sec), withRecheck(share(15*sec, 0, 0, false), 16*sec)},
			{16 * sec, "k", tenPerSecond, report("b", 0, 50, 5*sec), share(16*sec, 10*ps, 20, true)},
		}},
		{"buckets are apart", []step{
			{0, "k1", tenPerSecond, report("a", 1, 0, 0), share(0, 5*ps, 10, true)},
			{0, "k2", tenPerSecond, report("b", 1, 0, 0), share(0, 5*ps, 10, true)},
		}},
		{"a bucket used below its limit leaves room for a newcomer", []step{
			// 1/s: at most 1/s + its counting noise (2√5 + 1 requests over
			// 5 s, more than its demand) + φ, φ = max(D, r)/16 + 1.
			{0, "k", tenPerSecond, report("a", 5, 0, 5*sec), share(0, ps+noise5+54000001, 5, true)},
			// b, not measured: half of the rest. a, at its headroom over
			// its demand, lowers nothing at its next report: b is
			// re-checked when a's share would lapse (15 s + 1 s of grace).
			{100 * time.Millisecond, "k", tenPerSecond, report("b", 1, 0, 0),
				withRecheck(share(100*time.Millisecond, (10*ps-ps-noise5-54000001)/2, 7, true), 16*sec)},
		}},
		{"a lower limit lowers the share at the next report", []step{
			{0, "k", tenPerSecond, report("a", 1, 0, 0), share(0, 5*ps, 10, true)},
			{5 * sec, "k", rlqs.Fleet{Tokens: 2, Period: sec, Burst: 4}, report("a", 30, 20, 5*sec), share(5*sec, 2*ps, 4, true)},
		}},
		{"a zero limit denies", []step{
			{0, "k", rlqs.Fleet{Period: sec}, report("a", 1, 0, 0), share(0, 0, 0, true)},
		}},
	}
}

// noise5 is the counting noise of 5 requests over 5 s as a rate: 2√5 + 1
// requests (√5 to three decimals, as Policy takes it), over 5 s, in the
// unit of rlqs.PerSecond.
const noise5 = 5472 * rlqs.PerSecond / 5000

// Table runs the same cases of Assign on a ledger from newLedger (a new,
// empty one per case), so every Ledger implementation answers alike.
func Table(t *testing.T, newLedger func(t *testing.T) rlqs.Ledger) {
	for _, tc := range tableCases() {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(t)
			for i, s := range tc.steps {
				got, err := rlqs.AssignOne(context.Background(), l, Start.Add(s.at), s.key, s.f, s.r, tableTTL)
				if err != nil {
					t.Fatalf("step %d: Assign: %v", i, err)
				}
				if !sameShare(got, s.want) {
					t.Fatalf("step %d at %v: Assign(%+v) = %+v, want %+v", i, s.at, s.r, got, s.want)
				}
			}
		})
	}
}

// Concurrent has workers clients report one bucket at once, each through
// ledgers[worker%len], rounds times, all at the same instant, and checks
// that the shares last granted sum to at most the fleet's rate and burst
// (no expiry or grace ends in between, so every grant counts).
func Concurrent(t *testing.T, workers, rounds int, ledgers ...rlqs.Ledger) {
	t.Helper()
	f := tenPerSecond
	last := make([]rlqs.Share, workers)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			l := ledgers[w%len(ledgers)]
			var err error
			for i := range rounds {
				r := report(fmt.Sprintf("w%d", w), uint64(w+1)*uint64(i+1), 0, time.Second)
				if last[w], err = rlqs.AssignOne(context.Background(), l, Start, "hot", f, r, tableTTL); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("Assign: %v", err)
		}
	}
	var rate, burst uint64
	for _, s := range last {
		rate += s.Rate
		burst += s.Burst
	}
	if r := rlqs.FleetRate(f); rate > r {
		t.Fatalf("concurrent shares sum to rate %d, above the fleet's %d", rate, r)
	}
	if burst > f.Burst+2*uint64(workers) {
		t.Fatalf("concurrent bursts sum to %d, above %d + the floors", burst, f.Burst)
	}
	if rate == 0 {
		t.Fatal("no share granted at all")
	}
}

// sameShare is got == want with times compared as instants (a ledger may
// return them in another location).
func sameShare(got, want rlqs.Share) bool {
	return got.Rate == want.Rate && got.Burst == want.Burst && got.Changed == want.Changed &&
		got.Expires.Equal(want.Expires) && got.Recheck.Equal(want.Recheck)
}
