package redisledger

import (
	"context"
	"fmt"
	"strings"
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
//
// With Tries 1 every write that finds another replica's version is capped
// in Redis, which puts the script's bound and scans to the test.
func TestManyClientsTwoReplicas(t *testing.T) {
	t.Parallel()
	for _, tries := range []int{defaultTries, 1} {
		t.Run(fmt.Sprintf("tries=%d", tries), func(t *testing.T) {
			t.Parallel()
			manyClientsTwoReplicas(t, Options{Tries: tries})
		})
	}
}

func manyClientsTwoReplicas(t *testing.T, o Options) {
	srv := redistest.Start(t)
	ls := []*Ledger{New(srv.BoundedClient(t), o), New(srv.BoundedClient(t), o)}
	f := rlqs.WindowFleet(2000, 20*time.Second) // bench/rlqsload's rule: 100/s
	rTot := rlqs.FleetRate(f)
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
				s, err := rlqs.AssignOne(context.Background(), ls[i%len(ls)], at, "hot", f, report(i), ttl)
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
			rate += s.Rate
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
				if s.Recheck.After(when) {
					when = s.Recheck
				}
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
		rate += s.Rate
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

// A write capped in Redis that raises a share past the bucket's bound
// scans the clients at most once per scanGap: a scan grants what the
// others' counted shares leave; between scans the raise gets what the
// bound leaves, and a Recheck at the next scan. Another replica's writes
// are made by hand, so the Ledger's copy misses them. The same with the
// other replica's values in nine fields, as written before the fleet's
// rate was kept: a rolling upgrade finds buckets written by the older
// replicas, which the Ledger and the commit script both read.
func TestCappedRaise(t *testing.T) {
	t.Parallel()
	for _, enc := range []struct {
		name  string
		value func(rlqs.ClientState) string
	}{
		{"ten fields", func(st rlqs.ClientState) string { return string(appendState(nil, st)) }},
		{"nine fields", func(st rlqs.ClientState) string {
			ten := string(appendState(nil, st))
			return ten[:strings.LastIndexByte(ten, ',')]
		}},
	} {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			cappedRaise(t, enc.value)
		})
	}
}

// cappedRaise is TestCappedRaise with the other replica's values encoded
// by value.
func cappedRaise(t *testing.T, value func(rlqs.ClientState) string) {
	srv := redistest.Start(t)
	c := srv.BoundedClient(t)
	l := New(srv.BoundedClient(t), Options{Tries: 1})
	ctx := context.Background()
	f := rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 10}
	t0 := time.UnixMilli(1_764_190_800_000)
	// other writes a client's state as another replica would, with the
	// bound it leaves.
	other := func(version, client string, st rlqs.ClientState, bound string) {
		t.Helper()
		if err := c.HSet(ctx, "rlqs:k", "v", version, clientPrefix+client, value(st), boundField, bound).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// u is one token a second in the ledger's rate unit; the comments
	// below count in thousandths of u.
	const u = rlqs.PerSecond
	// bound is the hash's bound field: tokens a second, burst, and when
	// it was last scanned.
	bound := func(rate, burst uint64, at time.Duration) string {
		return fmt.Sprintf("%d,%d,%d", rate*u, burst, t0.Add(at).UnixMilli())
	}
	// x holds 5000, down from 10000 until t0+1s; the bound still counts
	// the 10000 (decreases leave it be).
	x := rlqs.ClientState{Demand: 1 * u, Rate: 5 * u, Burst: 5, PrevRate: 10 * u, PrevBurst: 10,
		PrevUntil: t0.Add(time.Second), Expires: t0.Add(time.Minute), Reported: t0}
	other("a", "x", x, bound(10, 10, 0))
	assign := func(at time.Duration) rlqs.Share {
		t.Helper()
		s, err := rlqs.AssignOne(ctx, l, t0.Add(at), "k", f, rlqs.Report{Client: "y", Allowed: 100, Elapsed: time.Second}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// l reads the bucket: x's decrease is in flight, y gets nothing yet.
	if s := assign(0); s.Rate != 0 || !s.Recheck.Equal(x.PrevUntil) {
		t.Fatalf("y beside x's decrease in flight: %+v", s)
	}
	// Another replica adds z with 3000 (the bound now 13000). l's copy
	// misses z: it asks for x's room, 5000, which the bound does not
	// leave; the last scan is 3 s old, so the script scans: x 5000 and
	// z 3000 leave 2000.
	z := rlqs.ClientState{Demand: 3 * u, Rate: 3 * u, Burst: 3, Expires: t0.Add(time.Minute), Reported: t0}
	other("b", "z", z, bound(13, 13, 0))
	if s := assign(3 * time.Second); s.Rate != 2*u || l.Recomputed() != 1 {
		t.Fatalf("y capped by a scan: %+v, %d capped; want 2000", s, l.Recomputed())
	}
	// z lowers its share to 1000. l asks again under scanGap after the
	// scan: the bound (10000 with y's 2000) leaves nothing, y keeps 2000
	// and is told to ask again at the next scan.
	z.Rate, z.Burst = 1*u, 1
	other("c", "z", z, bound(10, 10, 3*time.Second))
	if s := assign(3*time.Second + 200*time.Millisecond); s.Rate != 2*u || !s.Recheck.Equal(t0.Add(3*time.Second+scanGap)) {
		t.Fatalf("y held back by the bound: %+v; want 2000 and a recheck at the next scan", s)
	}
	// At the next scan z's decrease is seen: y gets 4000.
	if s := assign(3*time.Second + scanGap); s.Rate != 4*u || l.Recomputed() != 3 {
		t.Fatalf("y at the next scan: %+v, %d capped; want 4000", s, l.Recomputed())
	}
	// The Ledger writes ten fields, the fleet's rate last.
	v, err := c.HGet(ctx, "rlqs:k", clientPrefix+"y").Result()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := parseState(v); err != nil || st.Fleet != rlqs.FleetRate(f) || strings.Count(v, ",") != stateFields-1 {
		t.Fatalf("y's state %q = %+v, %v: want ten fields with the fleet's rate", v, st, err)
	}
}
