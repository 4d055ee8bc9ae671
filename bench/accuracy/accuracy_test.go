package accuracy_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

var writeDocs = flag.Bool("write-docs", false, "TestAccuracy writes its table into docs/algorithms.md and its chart to docs/algorithms.png")

// t0 is the simulation's clock origin, a window boundary for every size used.
var t0 = time.UnixMilli(1_763_800_020_000)

// The simulated limit: 100 requests per 60 s window.
const (
	simLimit = 100
	simSize  = 60_000 // ms
)

// simStart is a window boundary; every pattern starts there.
var simStart = t0.UnixMilli()

// pattern is a traffic pattern: request arrival times in ms after simStart,
// ascending.
type pattern struct {
	name    string // short, for the chart
	desc    string // for the table
	arrival []int64
}

// burst returns n arrivals spread evenly over [from, from+span).
func burst(from, span int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + span*int64(i)/int64(n)
	}
	return out
}

func patterns() []pattern {
	// steady: 1.5 x the limit, evenly spaced, for 10 windows.
	steady := burst(0, 10*simSize, 10*simLimit*3/2)

	// boundary: an empty window, then the limit in the last 1% of window 1
	// and the limit again in the first 1% of window 2.
	boundary := append(burst(2*simSize-simSize/100, simSize/100, simLimit), burst(2*simSize, simSize/100, simLimit)...)

	// on-off: the limit in 1% of a window, every 0.7 windows, 15 times.
	var onOff []int64
	for i := range 15 {
		onOff = append(onOff, burst(int64(i)*simSize*7/10, simSize/100, simLimit)...)
	}

	// late burst: the limit in the last 1% of window 1, then 1.5 x the
	// limit evenly through windows 2 and 3: the sliding counter's worst case.
	lateBurst := append(burst(2*simSize-simSize/100, simSize/100, simLimit), burst(2*simSize, 2*simSize, 2*simLimit*3/2)...)

	return []pattern{
		{"steady 1.5x", "steady: 1.5 x the limit, evenly spaced, 10 windows", steady},
		{"boundary burst", "boundary burst: the limit in the last 1% of a window and again in the first 1% of the next", boundary},
		{"on-off", "on-off: the limit within 1% of a window, every 0.7 windows, 15 bursts", onOff},
		// Seeds 1, 2 give the 1.2x pattern the figures docs/algorithms.md
		// quotes; 3, 4 are simply another fixed stream.
		{"poisson 1.2x", "Poisson: 1.2 x the limit, exponential gaps, 50 windows, seeded", poisson(1.2, 1, 2)},
		{"poisson 2x", "Poisson: 2 x the limit, exponential gaps, 50 windows, seeded", poisson(2, 3, 4)},
		{"late burst + steady", "late burst: the limit in the last 1% of a window, then 1.5 x the limit evenly for two windows", lateBurst},
	}
}

// poisson returns arrivals at rate x the limit with exponential gaps, for
// 50 windows, from a PCG generator with the given seeds: the same stream on
// every run.
func poisson(rate float64, seed1, seed2 uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed1, seed2))
	var out []int64
	meanGap := float64(simSize) / (rate * simLimit)
	for t := rng.ExpFloat64() * meanGap; t < 50*simSize; t += rng.ExpFloat64() * meanGap {
		out = append(out, int64(t))
	}
	return out
}

// algorithm decides one request at a time; allow counts it when it admits.
type algorithm struct {
	name  string
	alg   window.Algorithm
	burst uint64                     // TokenBucket's burst; 0 otherwise
	allow func() func(ms int64) bool // a fresh limiter per pattern
}

// The columns of the tables, in order.
const (
	colFixed = iota
	colSliding
	colBucket      // token bucket, burst = limit
	colSmallBucket // token bucket, burst = smallBurst
	colLog
)

// smallBurst is the burst of the second token bucket: a tenth of the limit,
// so its rolling-window bound, burst + rate x size, is 1.1 x the limit.
const smallBurst = simLimit / 10

func algorithms(t *testing.T) []algorithm {
	store := func(a window.Algorithm, burst uint64) func() func(int64) bool {
		return func() func(int64) bool {
			m := window.NewMemory()
			reqs := []window.Counter{{Key: "sim:{k}", Limit: simLimit, Size: simSize * time.Millisecond, Hits: 1, Algorithm: a, Burst: burst}}
			res := make([]window.Result, 1)
			return func(ms int64) bool {
				ok, err := m.Take(context.Background(), time.UnixMilli(simStart+ms), reqs, res)
				if err != nil {
					t.Fatalf("Take: %v", err)
				}
				return ok
			}
		}
	}
	algs := []algorithm{
		colFixed:       {name: "fixed window", alg: window.FixedWindow},
		colSliding:     {name: "sliding window", alg: window.SlidingWindow},
		colBucket:      {name: fmt.Sprintf("token bucket, burst %d", simLimit), alg: window.TokenBucket, burst: simLimit},
		colSmallBucket: {name: fmt.Sprintf("token bucket, burst %d", smallBurst), alg: window.TokenBucket, burst: smallBurst},
		colLog:         {name: "sliding log", alg: window.SlidingLog},
	}
	for i := range algs {
		algs[i].allow = store(algs[i].alg, algs[i].burst)
	}
	return algs
}

// exactLog is the reference: a log of admitted times that admits a request
// at now if fewer than the limit were admitted in (now-size, now].
func exactLog() func(ms int64) bool {
	var log []int64
	return func(ms int64) bool {
		for len(log) > 0 && log[0] <= ms-simSize {
			log = log[1:]
		}
		if len(log)+1 > simLimit {
			return false
		}
		log = append(log, ms)
		return true
	}
}

// bucketExcess returns the most hits admitted in any closed interval
// [t_i, t_j] between two admitted instants beyond what the rate refills in
// it: max over i <= j of (j-i+1) - limit*(t_j-t_i)/size, in hits, and
// scaled by size as an exact integer. A token bucket with burst b keeps it
// at most b. With A_j = (j+1)*size - limit*t_j and B_i = i*size -
// limit*t_i the scaled excess of [i, j] is A_j - B_i, so one pass keeping
// the least B_i so far finds the maximum over all pairs. Hits admitted at
// one instant are adjacent, so the pair from the first to the last of them
// counts them all.
func bucketExcess(admitted []int64) (hits float64, scaled int64) {
	if len(admitted) == 0 {
		return 0, 0
	}
	scaled = math.MinInt64
	minB := int64(math.MaxInt64)
	for j, t := range admitted {
		minB = min(minB, int64(j)*simSize-simLimit*t)
		scaled = max(scaled, int64(j+1)*simSize-simLimit*t-minB)
	}
	return float64(scaled) / simSize, scaled
}

// measure returns the largest number of admitted requests in any
// (t-size, t], over the limit, and how many admissions left more than the
// limit in the rolling window that ends at them. The maximum is reached at
// some admitted instant t, so it suffices to look there.
func measure(admitted []int64) (worst float64, over int) {
	most, lo := 0, 0
	for hi, t := range admitted {
		for admitted[lo] <= t-simSize {
			lo++
		}
		if hi-lo+1 > simLimit {
			over++
		}
		// Requests admitted at the same instant as t all count.
		n := hi - lo + 1
		for j := hi + 1; j < len(admitted) && admitted[j] == t; j++ {
			n++
		}
		most = max(most, n)
	}
	return float64(most) / simLimit, over
}

type outcome struct {
	worst    float64 // worst over-admission, a multiple of the limit
	admitted []int64 // the admitted arrivals
	over     int     // admissions beyond the limit of their rolling window
	excess   float64 // bucketExcess: most hits beyond rate x T in any interval
	scaled   int64   // excess x size, exact
}

func simulate(allow func(int64) bool, arrival []int64) outcome {
	var admitted []int64
	for _, ms := range arrival {
		if allow(ms) {
			admitted = append(admitted, ms)
		}
	}
	worst, over := measure(admitted)
	excess, scaled := bucketExcess(admitted)
	return outcome{worst, admitted, over, excess, scaled}
}

// utilisation is the share of the offered requests that o admitted.
func (o outcome) utilisation(offered int) float64 {
	return float64(len(o.admitted)) / float64(max(offered, 1))
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		admitted []int64
		worst    float64
		over     int
	}{
		{nil, 0, 0},
		{burst(0, 1000, 100), 1, 0},
		{burst(0, 120_000, 200), 1, 0}, // 100 per window, evenly
		{append(burst(59_000, 1000, 100), burst(60_000, 1000, 100)...), 2, 100},
		{[]int64{0, simSize}, 0.01, 0}, // (t-size, t] excludes t-size
		{[]int64{5, 5, 5}, 0.03, 0},
	} {
		worst, over := measure(tt.admitted)
		if math.Abs(worst-tt.worst) > 1e-9 || over != tt.over {
			t.Errorf("measure(%d admitted) = %v, %d, want %v, %d", len(tt.admitted), worst, over, tt.worst, tt.over)
		}
	}
}

func TestBucketExcess(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		admitted []int64
		excess   float64
	}{
		{nil, 0},
		{[]int64{7}, 1},
		{[]int64{5, 5, 5}, 3},
		{[]int64{0, 600}, 1}, // the rate refills one hit every 600 ms
		{[]int64{0, 300}, 1.5},
		{burst(0, 60_000, 100), 1}, // one per 600 ms: each pair exceeds the rate by one hit
		{append([]int64{0, 0, 0}, burst(60_000, 600, 4)...), 3.25}, // 4 hits in 450 ms beat 3 at once
	} {
		excess, scaled := bucketExcess(tt.admitted)
		if math.Abs(excess-tt.excess) > 1e-9 || float64(scaled) != excess*simSize {
			t.Errorf("bucketExcess(%v) = %v, %d, want %v", tt.admitted, excess, scaled, tt.excess)
		}
	}
}

// TestAccuracy replays each traffic pattern through each algorithm and
// measures the worst over-admission. It asserts each algorithm's guarantee
// (none for the windows, burst + rate x T for the token buckets, the limit
// for the sliding log) and the measured figures. With -write-docs it also
// writes the table into docs/algorithms.md and the chart to
// docs/algorithms.png.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	pats, algs := patterns(), algorithms(t)
	got := make([][]outcome, len(pats)) // [pattern][algorithm]
	for i, p := range pats {
		got[i] = make([]outcome, len(algs))
		for j, a := range algs {
			got[i][j] = simulate(a.allow(), p.arrival)
		}
	}
	table := accuracyTable(pats, algs, got)
	t.Log("\n" + table)

	for i, p := range pats {
		// The reference can never exceed the limit, or the measure is wrong.
		ref := simulate(exactLog(), p.arrival)
		if ref.worst > 1 {
			t.Errorf("%s: exact log worst = %.2f, want <= 1", p.name, ref.worst)
		}
		// The sliding log's guarantee: no rolling window over the limit,
		// and it admits exactly what the reference does.
		if l := got[i][colLog]; l.worst > 1 || l.over > 0 {
			t.Errorf("%s: sliding log worst = %.2f with %d over, want <= 1 with none", p.name, l.worst, l.over)
		}
		if l := got[i][colLog]; !slices.Equal(l.admitted, ref.admitted) {
			t.Errorf("%s: sliding log admitted %d, the exact log %d (or at other times)", p.name, len(l.admitted), len(ref.admitted))
		}
		// The token bucket's guarantee: over every interval between admitted
		// hits, at most burst + rate x T (exact, in integers).
		for _, j := range []int{colBucket, colSmallBucket} {
			if o, b := got[i][j], algs[j].burst; o.scaled > int64(b)*simSize {
				t.Errorf("%s, %s: %.3f hits beyond rate x T, want <= burst %d", p.name, algs[j].name, o.excess, b)
			}
		}
		// Every algorithm with the limit as its capacity admits at least
		// what the exact log admits at its worst moment: none is so strict
		// that it wastes a whole window. (The small bucket is, by design.)
		for j, a := range algs {
			if j != colSmallBucket && got[i][j].worst < 0.99 {
				t.Errorf("%s, %s: worst = %.2f, want >= 0.99 (the pattern asks for more than the limit)", p.name, a.name, got[i][j].worst)
			}
		}
	}
	// The bounds are what the patterns really give, with a little margin;
	// docs/algorithms.md explains each. min <= worst <= max. The sliding
	// log is checked above.
	type bound struct{ min, max float64 }
	bounds := map[string][4]bound{ // fixed, sliding, bucket, small bucket
		// A steady stream fills a fixed window in its first 2/3 and is then
		// denied until the boundary, so no rolling window sees more than
		// one window's admissions. The sliding estimate is exact for an
		// even spread. A full bucket of 100 drains by a third of a token
		// per request, so the first 120 s pass whole: 150 in the first
		// rolling window.
		"steady 1.5x": {{0.99, 1.01}, {0.99, 1.02}, {1.45, 1.5}, {1.05, 1.1}},
		// The fixed window's textbook failure. The sliding counter still
		// weighs the previous window at 99-100% during the second burst;
		// a bucket has refilled only what 1.2 s gives.
		"boundary burst": {{1.9, 2}, {0.99, 1.02}, {1, 1.03}, {0.1, 0.13}},
		// Bursts at changing phases. A burst late in one window is
		// underweighted by the next window's estimate once the rolling
		// window has passed the phase at which it came: measured 1.19.
		// A bucket refills 70 between bursts 0.7 windows apart.
		"on-off": {{1.9, 2}, {0.99, 1.25}, {1.65, 1.75}, {0.15, 0.25}},
		// Random gaps spread no window evenly; the estimate is off by the
		// unevenness of the previous window, about its sqrt(n): measured
		// 1.10 for this seed, 1.07-1.12 over seeds 1-20.
		// A bucket that random lulls have refilled lets a burst of up to
		// its size through on top of the rate: up to 2x at twice the limit.
		"poisson 1.2x": {{1, 1.5}, {0.99, 1.15}, {1.3, 1.5}, {1.05, 1.1}},
		"poisson 2x":   {{1.1, 1.4}, {0.99, 1.1}, {1.9, 2}, {1.05, 1.1}},
		// The sliding counter's worst case: every hit of the previous
		// window at its end, so the estimate lets them fade while they all
		// still count. Both windows, and a full bucket, approach twice the
		// limit.
		"late burst + steady": {{1.9, 2}, {1.9, 2}, {1.9, 2}, {1, 1.1}},
	}
	for i, p := range pats {
		b, ok := bounds[p.name]
		if !ok {
			t.Fatalf("no bounds for pattern %q", p.name)
		}
		for j := range b {
			if w := got[i][j].worst; w < b[j].min || w > b[j].max {
				t.Errorf("%s: %s worst = %.2f, want in [%.2f, %.2f]", p.name, algs[j].name, w, b[j].min, b[j].max)
			}
		}
	}

	if !*writeDocs {
		return
	}
	docs := filepath.Join("..", "..", "docs")
	if err := writeTable(filepath.Join(docs, "algorithms.md"), table); err != nil {
		t.Fatal(err)
	}
	if err := writeChart(filepath.Join(docs, "algorithms.png"), pats, algs, got); err != nil {
		t.Fatal(err)
	}
}
