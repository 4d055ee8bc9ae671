package redisledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// manyClients is how many Envoys report one bucket at once in
// TestManyClientsTwoReplicas: the bench's fleet that made every write of
// a version-checked ledger lose.
const manyClients = 400

// Hundreds of Envoys subscribing to and reporting one bucket at once
// through two replicas: every Assign answers a share (a bucket another
// replica wrote meanwhile is capped in Redis, never an error), the shares
// in force never sum above the fleet's rate (nor its burst beyond the
// floors), and two rounds of reports later, with the re-checks the server
// makes, the fleet's rate is in use.
func TestManyClientsTwoReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ls := []*Ledger{New(srv.BoundedClient(t), Options{}), New(srv.BoundedClient(t), Options{})}
	f := rlqs.WindowFleet(2000, 20*time.Second) // bench/rlqsload's rule: 100/s
	rTot := rlqs.FleetMilliRate(f)
	const ttl = 15 * time.Second
	start := time.UnixMilli(1_764_190_800_000)
	shares := make([]rlqs.Share, manyClients)
	id := func(i int) string { return fmt.Sprintf("envoy-%d", i) }

	// round runs report(i) for the clients in who, all at once, at at.
	round := func(name string, at time.Time, who []int, report func(i int) rlqs.Report) {
		t.Helper()
		errs := make(chan error, len(who))
		for _, i := range who {
			go func() {
				s, err := ls[i%len(ls)].Assign(context.Background(), at, "hot", f, report(i), ttl)
				if err == nil {
					shares[i] = s
				}
				errs <- err
			}()
		}
		for range who {
			if err := <-errs; err != nil {
				t.Fatalf("%s: Assign: %v", name, err)
			}
		}
		var rate, burst uint64
		for _, s := range shares {
			rate += s.MilliRate
			burst += s.Burst
		}
		if rate > rTot {
			t.Fatalf("%s: shares sum to %d thousandths/s, above the fleet's %d", name, rate, rTot)
		}
		if burst > f.Burst+minBurst*manyClients {
			t.Fatalf("%s: bursts sum to %d, above %d + the floors", name, burst, f.Burst)
		}
		t.Logf("%s: shares sum to %.1f%% of the fleet's rate", name, 100*float64(rate)/float64(rTot))
	}
	all := make([]int, manyClients)
	for i := range all {
		all[i] = i
	}
	round("subscriptions", start, all, func(i int) rlqs.Report { return rlqs.Report{Client: id(i)} })
	for n := 1; n <= 2; n++ {
		// Skewed demand, 2.4 times the fleet's rate in all: 1 to 5
		// requests each over 5 s.
		at := start.Add(time.Duration(n) * 5 * time.Second)
		name := fmt.Sprintf("report %d", n)
		round(name, at, all, func(i int) rlqs.Report {
			return rlqs.Report{Client: id(i), Allowed: uint64(i % 5), Denied: 1, Elapsed: 5 * time.Second}
		})
		// The server asks again at a share's Recheck: when the decreases
		// still in flight stop counting.
		var recheck []int
		var when time.Time
		for i, s := range shares {
			if !s.Recheck.IsZero() {
				recheck = append(recheck, i)
				when = maxTime(when, s.Recheck)
			}
		}
		if len(recheck) > 0 {
			round(fmt.Sprintf("%s: %d re-checks", name, len(recheck)), when, recheck, func(i int) rlqs.Report { return rlqs.Report{Client: id(i)} })
		}
	}
	// After the first reports the use depends on the order the clients
	// came in (those before the first decrease find no room and no
	// re-check); a report later every client holds its target.
	var rate uint64
	for _, s := range shares {
		rate += s.MilliRate
	}
	if rate < rTot*9/10 {
		t.Fatalf("two rounds of reports in, the shares use %d of the fleet's %d thousandths/s, want at least 90%%", rate, rTot)
	}
	var capped uint64
	for _, l := range ls {
		capped += l.Recomputed()
	}
	t.Logf("%d writes capped in Redis", capped)
}
