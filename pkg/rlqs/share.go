package rlqs

import (
	"math"
	"math/bits"
	"time"
)

// Policy is how a ledger divides a Fleet among the clients of one bucket.
// The zero value uses every default. Divide is the whole policy; the memory
// and Redis ledgers only keep its state.
type Policy struct {
	// Hysteresis, in thousandths, is how far a client's target rate may
	// move from the rate it holds before the ledger changes the share:
	// within it the client keeps its share and only its TTL is extended,
	// which spares Envoy a new token bucket at every report. Default 100
	// (10%); a negative value turns it off.
	Hysteresis int
	// Grace is added to a share's TTL in the ledger: Envoy starts the TTL
	// when the assignment arrives, after the ledger wrote it, so the ledger
	// counts a share until Grace past the TTL it sent. Default 1 s.
	Grace time.Duration
}

const (
	defaultHysteresis = 100
	defaultGrace      = time.Second
	// floorDiv sets the floor weight every client has on top of its
	// demand: max(D, r)/(floorDiv·N). It keeps a client whose last interval
	// was idle from being shut out until its next report (it holds at
	// least r/((floorDiv+1)·N)), and bounds what an idle client holds when
	// the fleet is busy to the same r/((floorDiv+1)·N).
	floorDiv = 16
	milli    = 1000
)

func (p Policy) hysteresis() uint64 {
	switch {
	case p.Hysteresis < 0:
		return 0
	case p.Hysteresis == 0:
		return defaultHysteresis
	}
	return uint64(p.Hysteresis)
}

func (p Policy) grace() time.Duration {
	if p.Grace <= 0 {
		return defaultGrace
	}
	return p.Grace
}

// ClientState is what a ledger keeps about one client of one bucket.
type ClientState struct {
	// Demand is the client's smoothed demand, in thousandths of a request
	// per second, from (allowed + denied) / elapsed of its reports.
	Demand uint64
	// Rate (thousandths of a token per second) and Burst (tokens) are the
	// share the client was last granted.
	Rate, Burst uint64
	// PrevRate and PrevBurst are the share a decrease replaced: Envoy runs
	// the old bucket until the new assignment arrives, so the ledger counts
	// the larger of the two until the client's next report (by then Envoy
	// has applied the decrease, unless the answer took longer than a
	// report interval to arrive; docs/rlqs.md counts that case).
	PrevRate, PrevBurst uint64
	// Expires is when the ledger stops counting the share: the grant's TTL
	// plus Policy.Grace. An expired client is dropped.
	Expires time.Time
}

// counted is the rate and burst the client may be admitting under now.
func (c ClientState) counted() (rate, burst uint64) {
	return max(c.Rate, c.PrevRate), max(c.Burst, c.PrevBurst)
}

// FleetMilliRate is f's rate in thousandths of a token per second, rounded
// down (saturating at the largest uint64).
func FleetMilliRate(f Fleet) uint64 {
	if f.Tokens == 0 || f.Period <= 0 {
		return 0
	}
	return mulDiv(f.Tokens, milli*uint64(time.Second), uint64(f.Period))
}

// WindowFleet is the Fleet of a fixed or sliding window rule of limit
// requests per period: its rate, and a burst of one second's worth
// (ceil(limit·1s/period), at least 1, at most limit). The burst is an error
// term of a window rule's guarantee, so it is kept small; one second's
// worth still lets a client that holds a share admit a short burst.
func WindowFleet(limit uint64, period time.Duration) Fleet {
	f := Fleet{Tokens: limit, Period: period}
	if limit == 0 || period <= 0 {
		return f
	}
	f.Burst = min(max(mulDivUp(limit, uint64(time.Second), uint64(period)), 1), limit)
	return f
}

// mulDiv is a·b/c rounded down, in 128-bit arithmetic, saturating.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// mulDivUp is a·b/c rounded up, in 128-bit arithmetic, saturating.
func mulDivUp(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, rem := bits.Div64(hi, lo, c)
	if rem != 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// satAdd is a+b, saturating.
func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// Divide is the division policy. Given the bucket's clients (others, which
// must not contain r.Client; expired entries are fine), the reporting
// client's previous state (known false when it has none), the fleet f and
// the report r received at now, it returns the client's new share and
// state, and the clients whose shares have expired (for the ledger to
// drop). It never returns a share that would take the unexpired clients'
// counted rates or bursts above f's, except for the one-token floor of a
// burst (see docs/rlqs.md, "The guarantee").
func (p Policy) Divide(now time.Time, f Fleet, others map[string]ClientState, prev ClientState, known bool, r Report, ttl time.Duration) (Share, ClientState, []string) {
	rTot := FleetMilliRate(f)
	var expired []string
	var live, sumDemand, usedRate, usedBurst uint64
	for id, c := range others {
		if !c.Expires.After(now) {
			expired = append(expired, id)
			continue
		}
		live++
		sumDemand = satAdd(sumDemand, c.Demand)
		cr, cb := c.counted()
		usedRate = satAdd(usedRate, cr)
		usedBurst = satAdd(usedBurst, cb)
	}
	if known && !prev.Expires.After(now) {
		known = false // its assignment has lapsed in Envoy as well
	}
	if !known {
		prev = ClientState{}
	}

	// The client's demand: a report's (allowed+denied)/elapsed, averaged
	// with the previous estimate. Without an elapsed time (the immediate
	// report of a new bucket) a new client is taken to want the average of
	// the others, or the whole rate when alone.
	cur := prev
	cur.PrevRate, cur.PrevBurst = 0, 0 // the last decrease is in force by now
	if r.Elapsed > 0 {
		sample := mulDiv(satAdd(r.Allowed, r.Denied), milli*uint64(time.Second), uint64(r.Elapsed))
		if known {
			cur.Demand = prev.Demand/2 + sample/2 + (prev.Demand & sample & 1)
		} else {
			cur.Demand = sample
		}
	} else if !known {
		cur.Demand = rTot
		if live > 0 {
			cur.Demand = sumDemand / live
		}
	}
	n := live + 1
	total := satAdd(sumDemand, cur.Demand)

	// The target: r·(d_i + φ)/(D + n·φ) with φ = max(D, r)/(floorDiv·n).
	phi := max(total, rTot)/(floorDiv*n) + 1
	weight := satAdd(cur.Demand, phi)
	weights := satAdd(total, mulSat(phi, n))
	target := min(mulDiv(rTot, weight, weights), rTot)

	availRate := rTot - min(usedRate, rTot)
	availBurst := f.Burst - min(usedBurst, f.Burst)

	rate, burst := prev.Rate, prev.Burst
	keep := known && rate <= availRate && burst <= availBurst && burst > 0 &&
		absDiff(target, rate) <= mulDiv(rate, p.hysteresis(), milli)
	if !keep {
		rate = min(target, availRate)
		burst = 0
		if rate > 0 {
			// A burst in proportion to the rate, at least one token (a
			// bucket of 0 admits nothing).
			burst = max(1, min(mulDiv(f.Burst, rate, max(rTot, 1)), availBurst))
		}
	}
	if rate < prev.Rate {
		cur.PrevRate = prev.Rate
	}
	if burst < prev.Burst {
		cur.PrevBurst = prev.Burst
	}
	cur.Rate, cur.Burst = rate, burst
	cur.Expires = now.Add(ttl + p.grace())
	share := Share{
		MilliRate: rate,
		Burst:     burst,
		Expires:   now.Add(ttl),
		Changed:   !known || rate != prev.Rate || burst != prev.Burst,
	}
	return share, cur, expired
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
