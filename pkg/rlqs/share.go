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
	// rise above the rate it holds before the ledger raises the share:
	// within it the client keeps its share and only its TTL is extended,
	// which spares Envoy a new token bucket at every report. A target
	// below the share lowers it beyond the same margin. Default 50 (5%);
	// a negative value turns it off. Whatever the target, a client whose
	// report shows denials and no admission keeps a share that still fits
	// (its bucket is refilling a fraction of a token; see refilling).
	Hysteresis int
	// Grace bounds how long an assignment takes to reach Envoy. Envoy
	// starts the TTL when the assignment arrives, so the ledger counts a
	// share until Grace past the TTL it sent; and it counts the old share
	// of a decrease for Grace, as Envoy runs the old bucket until the new
	// one arrives. An answer later than Grace is an error term of the
	// guarantee (docs/rlqs.md). Default 1 s.
	Grace time.Duration
	// ReportInterval is how often a client reports (Envoy 1.40: every 5 s,
	// whatever the bucket's reporting_interval says). A client capped well
	// below its target is re-checked Grace after another client's next
	// report is due, when a decrease of that client's share (say, after a
	// limit fell) has reached its Envoy. Default 5 s.
	ReportInterval time.Duration
}

const (
	defaultHysteresis = 50
	defaultGrace      = time.Second
	defaultInterval   = 5 * time.Second
	// floorDiv sets the floor weight every client has on top of its
	// demand: max(D, r)/(floorDiv·N). It keeps a client whose last interval
	// was idle from being shut out until its next report (it holds at
	// least r/((floorDiv+1)·N)), and bounds what an idle client holds when
	// the fleet is busy to the same r/((floorDiv+1)·N).
	floorDiv = 16
	milli    = 1000
	// minBurst is the least max_tokens a client with a rate gets. A bucket
	// of one token wastes its refill while full: requests arriving evenly
	// a little faster than its rate find 0.9 tokens, are denied, and the
	// next one finds the bucket capped at 1, so it admits every other
	// request, half its rate. Two tokens never saturate under demand
	// above the rate. The floors are an error term of the guarantee.
	minBurst = 2
)

// PerSecond is a rate of one token (or request) a second in the unit of
// every rate and demand of this package: thousandths of a token a day. It
// is exact for rules per second, minute, hour and day, and fine enough that
// a share of one token a day is one (Strategy then encodes it with a day's
// fill_interval). A uint64 holds up to 2·10^11 a second; beyond, the
// arithmetic saturates.
const PerSecond uint64 = 86_400_000

func (p Policy) hysteresis() uint64 {
	switch {
	case p.Hysteresis < 0:
		return 0
	case p.Hysteresis == 0:
		return defaultHysteresis
	}
	return uint64(p.Hysteresis)
}

func (p Policy) interval() time.Duration {
	if p.ReportInterval <= 0 {
		return defaultInterval
	}
	return p.ReportInterval
}

func (p Policy) grace() time.Duration {
	if p.Grace <= 0 {
		return defaultGrace
	}
	return p.Grace
}

// ClientState is what a ledger keeps about one client of one bucket.
type ClientState struct {
	// Demand is the client's demand, in requests per second in the unit
	// of PerSecond: (allowed + denied) / elapsed of its last report with an
	// elapsed time. Envoy's reports already average over their interval.
	Demand uint64
	// Rate (in the unit of PerSecond) and Burst (tokens) are the
	// share the client was last granted.
	Rate, Burst uint64
	// PrevRate and PrevBurst are the share a decrease replaced, counted
	// until PrevUntil: Envoy runs its old bucket until the new assignment
	// arrives, which Policy.Grace bounds.
	PrevRate, PrevBurst uint64
	PrevUntil           time.Time
	// Expires is when the ledger stops counting the share: the grant's TTL
	// plus Policy.Grace. An expired client is dropped.
	Expires time.Time
	// Reported is when the client's last report with an elapsed time (or
	// its first) reached the ledger; a re-check (Elapsed 0) leaves it.
	Reported time.Time
	// Estimated is true until a report with an elapsed time measures the
	// client's demand; Divide then takes it to be the average of the
	// measured clients' (Demand is 0).
	Estimated bool
	// Fleet is the fleet's rate (in the unit of PerSecond) when the share
	// was granted; 0 when unknown. A share granted under a larger rate
	// than the fleet's now is one from before the limit fell, which its
	// client's next report lowers (see Policy.fallen).
	Fleet uint64
}

// Counted is the rate and burst the client may be admitting under at now:
// its share, or the one a decrease replaced while that may still be in
// force in Envoy.
func (c ClientState) Counted(now time.Time) (rate, burst uint64) {
	if c.PrevUntil.After(now) {
		return max(c.Rate, c.PrevRate), max(c.Burst, c.PrevBurst)
	}
	return c.Rate, c.Burst
}

// FleetRate is f's rate in the unit of PerSecond, rounded down
// (saturating at the largest uint64).
func FleetRate(f Fleet) uint64 {
	if f.Tokens == 0 || f.Period <= 0 {
		return 0
	}
	return mulDiv(f.Tokens, PerSecond*uint64(time.Second), uint64(f.Period))
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
	q, _ := mulDivRem(a, b, c)
	return q
}

// mulDivUp is a·b/c rounded up, in 128-bit arithmetic, saturating.
func mulDivUp(a, b, c uint64) uint64 {
	q, rem := mulDivRem(a, b, c)
	if rem != 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// mulDivRem is a·b/c and its remainder; a quotient beyond 64 bits is
// math.MaxUint64 with no remainder.
func mulDivRem(a, b, c uint64) (q, rem uint64) {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64, 0
	}
	return bits.Div64(hi, lo, c)
}

// satAdd is a+b, saturating.
func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// Divide is the division policy. Given the bucket's clients (expired
// entries are fine), the index self of the reporting client's entry in them
// (r.Client's; -1 when it has none), the fleet f and the report r received
// at now, it returns the client's new share and state, and the other
// clients whose shares have expired (for the ledger to drop). It reads
// clients and changes nothing: the ledger stores the new state. It never
// returns a share that would take the unexpired clients' counted rates or
// bursts above f's, except for the 2-token floor of a burst (see
// docs/rlqs.md, "The guarantee").
func (p Policy) Divide(now time.Time, f Fleet, clients *Clients, self int, r Report, ttl time.Duration) (Share, ClientState, []string) {
	var prev ClientState
	known := self >= 0
	if known {
		prev = clients.states[self]
	}
	rTot := FleetRate(f)
	o := scan(now, clients, self)
	if known && !prev.Expires.After(now) {
		known = false // its assignment has lapsed in Envoy as well
	}
	if !known {
		prev = ClientState{}
	}
	cur, el := p.measure(now, prev, known, r)
	heldRate, heldBurst := prev.Counted(now)
	target := p.target(o, rTot, cur)
	want := target // what it would take were the room free

	availRate := rTot - min(o.usedRate, rTot)
	if cur.Estimated {
		// Its demand is not measured yet: it takes at most half of the
		// room no one holds, so newcomers each get some (r/2, r/4, …)
		// until their first periodic report measures them.
		own := min(prev.Rate, availRate)
		target = min(target, own+(availRate-own)/2)
	}
	// A client that was denied (its demand exceeds its share) may take
	// half of the room no one holds beyond its target, up to its demand,
	// so room the others' targets leave (their measures move from report
	// to report) is used rather than left idle; the other half stays for
	// the next reporter or a newcomer. What it takes beyond its target it
	// gives back at its next report once the room is gone.
	var spare uint64
	if !cur.Estimated && r.Denied > 0 {
		spare = (availRate - min(prev.Rate, availRate)) / 2
		target = withSpare(target, spare, cur.Demand)
	}
	availBurst := f.Burst - min(o.usedBurst, f.Burst)
	rate, burst := prev.Rate, prev.Burst
	var relief time.Time // when a share fallen raised must be divided again
	// A share may be kept while it fits beside the others: its burst
	// within what they leave, or at the floor every client with a rate
	// gets anyway (a new share would have it too).
	fits := known && rate <= availRate && burst > 0 && burst <= max(availBurst, minBurst)
	keep := fits && (p.near(o, rTot, cur, r, el, rate, spare) || refilling(prev, r, el))
	if !keep {
		rate, relief = p.fallen(now, rTot, o, cur, clients, self, target, availRate, heldRate)
		if rate > 0 && rate < oneADay {
			// Not below one token a day while there is room: Strategy
			// sends a share below it as DENY_ALL, and a token bucket
			// that replaces a blanket rule starts full, so a share
			// flipping across that edge (an idle report puts it at the
			// floor, a busy one above) would gain max_tokens at every
			// flip. Without the room it holds nothing rather than a
			// rate Envoy cannot use.
			rate = oneADay
			if availRate < oneADay {
				rate = 0
			}
		}
		burst = 0
		if rate > 0 {
			// A burst in proportion to the rate, but at least minBurst.
			burst = max(minBurst, min(mulDiv(f.Burst, rate, max(rTot, 1)), availBurst))
		}
	}
	if rate < heldRate || burst < heldBurst {
		// A decrease: Envoy may run the larger share until the answer
		// arrives.
		cur.PrevRate, cur.PrevBurst = max(rate, heldRate), max(burst, heldBurst)
		cur.PrevUntil = now.Add(p.grace())
	}
	cur.Rate, cur.Burst, cur.Fleet = rate, burst, rTot
	cur.Expires = now.Add(ttl + p.grace())
	if r.Elapsed > 0 || !known {
		// A re-check is no report: the next report's elapsed time is
		// measured from the last one.
		cur.Reported = now
	}
	share := Share{
		Rate:    rate,
		Burst:   burst,
		Expires: now.Add(ttl),
		Changed: !known || rate != prev.Rate || burst != prev.Burst,
	}
	if !keep && rate < want {
		share.Recheck = p.recheck(now, rTot, o, clients, self, cur, want)
	}
	share.Recheck = earliest(share.Recheck, relief)
	return share, cur, o.expired
}

// recheck is when a client capped at cur.Rate below its target want may
// find more room (Share.Recheck), zero for never before its next report.
// Room comes free when another client's share lapses (a reconnected
// Envoy's old client, for one), and when the decreases in flight stop
// counting: at the last of them (they all end within Grace), when together
// they free enough to raise the share beyond the hysteresis or to its
// target. With forty clients a decrease lands every second or so, each
// freeing a little; a re-check at every one sent a token bucket a few
// percent larger each time. For a client well short of its target room may
// also come free at another client's next report.
func (p Policy) recheck(now time.Time, rTot uint64, o othersUse, clients *Clients, self int, cur ClientState, want uint64) time.Time {
	h := mulDiv(want, p.hysteresis(), milli)
	at, freedLast := clients.times(now, self)
	if satAdd(o.freedRate, h) >= want-cur.Rate || o.freedRate >= h {
		at = earliest(at, freedLast)
	}
	if cur.Rate >= want-h {
		return at
	}
	// At the first answer after now to the report of another client that
	// holds more than its target: that report lowers its share (after a
	// limit fell, every client's), and the room is free once the decrease
	// has reached its Envoy. A client near its target frees nothing unless
	// its demand falls, which this client finds at its own next report:
	// re-checking at every other client's answer cost most of a busy
	// bucket's CPU and mostly found no more room. A fixed spacing between
	// re-checks, tried before, skipped the answer that frees the room after
	// a limit fell (TestRLQS: cold denied).
	lowers := func(y ClientState) bool { return p.lowers(rTot, o, cur, y) }
	return earliest(at, nextAnswer(now, now.Add(time.Nanosecond), clients, self, p.interval(), p.grace(), lowers))
}

// fallen is the rate of a share that is not kept, and when a share it
// raised above what fits now must be divided again (zero for none): its
// target within the room the others leave (availRate), unless the limit
// fell. Then the fleet counts more than r: shares granted under the old
// limit, and decreases in flight. Each client still holding one (granted
// under a larger rate than r now, ClientState.Fleet) comes down to at most
// its target at its next report, due within one report interval and Grace
// since its last; each decrease in flight has landed within Grace. A client
// then goes down only to what it will have once they have: its target
// within the room that leaves (settled), and never up. The nothing left
// now would be a DENY_ALL or a share far under its demand until a
// re-check, which a bucket under its new limit must not see (docs/rlqs.md,
// step 5; TestFallUnderLimit). The share is divided again when the first of
// those reports is overdue: a client that did not report (its stream is
// gone) then counts in full. So the fleet counts no more than it did while
// the change settles, within the old limit, and within the new one from
// one report interval and Grace after the change: every grant since counted
// the clients granted since in full. While the fleet counts no more than r
// this is min(target, availRate).
func (p Policy) fallen(now time.Time, rTot uint64, o othersUse, cur ClientState, clients *Clients, self int, target, availRate, heldRate uint64) (uint64, time.Time) {
	rate := min(target, availRate)
	if rate >= heldRate || satAdd(o.usedRate, heldRate) <= rTot {
		return rate, time.Time{}
	}
	settled, due := p.settled(now, rTot, o, cur, clients, self)
	if r := min(heldRate, target, rTot-min(settled, rTot)); r > rate {
		return r, due
	}
	return rate, time.Time{}
}

// settled is what the unexpired clients but entry self will count once
// those granted before the limit fell have reported and the decreases in
// flight have landed (cur is the client being divided, o its sums), and
// the first answer to one of those reports (zero for none). A client
// granted under a larger rate than rTot counts at most its target: its
// next report, projected on its phase from its last recorded one (a kept
// report is not recorded, see Request.Quiet), lowers it. One with a
// decrease in flight counts its new share; every other, what it counts
// now. A client that stopped reporting is so counted at its target until
// its entry lapses: its Envoy, if alive, reopens a stream and reports as a
// new client (counted in full), or, cut off from every sidecar, runs its
// assignment until the TTL and then its expired_assignment_behavior. It
// reads every client; it runs only after a limit fell.
func (p Policy) settled(now time.Time, rTot uint64, o othersUse, cur ClientState, clients *Clients, self int) (uint64, time.Time) {
	var sum uint64
	var due time.Time
	for i := range clients.states {
		y := clients.states[i]
		if i == self || !y.Expires.After(now) {
			continue
		}
		counted, _ := y.Counted(now)
		switch {
		case y.Fleet > rTot:
			counted = min(counted, p.targetBeside(rTot, o, cur, y))
			due = earliest(due, answerAfter(now.Add(time.Nanosecond), y.Reported, p.interval(), p.grace()))
		case y.PrevUntil.After(now):
			counted = y.Rate
		}
		sum = satAdd(sum, counted)
	}
	return sum, due
}

// answerAfter is the first answer, at or after from, to a report of a
// client that last reported at reported and reports every interval: the
// first reported + m·interval + grace (m ≥ 1) at or after from.
func answerAfter(from, reported time.Time, interval, grace time.Duration) time.Time {
	f := from.UnixNano()
	return from.Add(time.Duration(answerAt(f, reported.UnixNano(), int64(interval), int64(grace)) - f))
}

// answerAt is answerAfter on Unix nanoseconds.
func answerAt(from, reported, interval, grace int64) int64 {
	t := reported + interval + grace
	if t < from && interval > 0 {
		t += ((from - t + interval - 1) / interval) * interval
	}
	return t
}

// near reports whether rate is close enough to the client's target that a
// new token bucket is not worth its cost (Envoy floors the replaced
// bucket's tokens, up to one token a replacement): within the hysteresis
// of the targets its report is consistent with. A report of n requests
// over el measures a rate between (n−1)/el and (n+1)/el (Envoy counts
// whole requests), which for a client of a few requests a report is tens
// of percent either way; a share inside that range is as right as the
// measure can tell. A denied client is lowered only beyond twice the
// counting noise of its report (1 + 2√n requests): its bucket is empty, so
// each replacement loses the fraction of a token it held, and an Envoy
// behind a random load balancer counts a Poisson number of requests. A
// fleet of such Envoys, all denied, is full whatever the division, and a
// share lowered for noise is raised again at the next report, at a token
// lost per change (docs/rlqs.md, step 4).
func (p Policy) near(o othersUse, rTot uint64, cur ClientState, r Report, el time.Duration, rate, spare uint64) bool {
	h := mulDiv(rate, p.hysteresis(), milli)
	t := func(d uint64) uint64 {
		c := cur
		c.Demand = d
		return withSpare(p.target(o, rTot, c), spare, d)
	}
	lo, hi := t(cur.Demand), t(cur.Demand)
	if el > 0 && !cur.Estimated {
		up := uint64(1)
		if r.Denied > 0 {
			up += 2 * isqrt(satAdd(r.Allowed, r.Denied))
		}
		hi = t(satAdd(cur.Demand, perSecond(up, el)))
		lo = t(cur.Demand - min(cur.Demand, perSecond(1, el)))
	}
	return satAdd(rate, h) >= lo && rate <= satAdd(hi, h)
}

// withSpare is target raised by spare, but not above demand.
func withSpare(target, spare, demand uint64) uint64 {
	if spare == 0 {
		return target
	}
	return max(target, min(satAdd(target, spare), demand))
}

// oneADay is a rate of one token a day, the least Strategy encodes as a
// token bucket.
const oneADay = PerSecond / (24 * 60 * 60)

// refilling reports whether the client's token bucket is refilling a
// fraction of a token that a replacement would lose: it holds a token
// bucket that refills less than one token over the report's el, and the
// report shows demand but no admission, so the bucket held less than one
// token for the whole report. Envoy starts a replacing bucket at the old
// one's fill ratio rounded down to whole tokens, so replacing it at every
// report (as noisy demand of a few requests a report would) keeps it from
// ever reaching a whole token. Once it admits, the fraction it holds is
// what it refilled since, and the next report may replace it at little
// cost. A faster share that reports no admission is not refilling (it was
// denied for another reason: a spent window, a report out of step), and
// is divided as usual.
func refilling(prev ClientState, r Report, el time.Duration) bool {
	if r.Allowed != 0 || r.Denied == 0 || el <= 0 ||
		mulDiv(prev.Rate, uint64(el), uint64(time.Second)) >= PerSecond {
		return false
	}
	_, _, _, ok := tokenBucket(Share{Rate: prev.Rate, Burst: prev.Burst})
	return ok
}

// othersUse sums up a bucket's other clients at one instant.
type othersUse struct {
	expired             []string // clients whose share has expired
	live, measured      uint64   // unexpired clients, and those with a measured demand
	sumDemand           uint64   // the measured demands' sum
	usedRate, usedBurst uint64   // what the unexpired clients count
	freedRate           uint64   // the rate the decreases in flight free once they stop counting
}

// scan sums up the clients but entry self at now: the sum of every entry,
// which Clients keeps between divisions (clientSum), less self's part; over
// every entry but self when that cannot be done exactly.
func scan(now time.Time, clients *Clients, self int) othersUse {
	o, ok := clients.sumAt(now)
	if !ok || self >= 0 && !o.sub(partOf(&clients.states[self], now)) {
		return scanEvery(now, clients, self)
	}
	return o
}

// scanEvery is scan, reading every entry but self.
func scanEvery(now time.Time, clients *Clients, self int) othersUse {
	var o othersUse
	for i := range clients.states {
		if i == self {
			continue
		}
		p := partOf(&clients.states[i], now)
		if p.lapsed {
			o.expired = append(o.expired, clients.ids[i])
			continue
		}
		o.add(p)
	}
	return o
}

// lowers reports whether y's next report is expected to lower its share,
// its demand unchanged: y holds more than near keeps beside the bucket as
// it is now, the hysteresis above its target for one request more a report
// interval than it last reported (o, the sums of the others of cur, the
// client being divided, counts y; y's own sums have cur in y's place).
func (p Policy) lowers(rTot uint64, o othersUse, cur, y ClientState) bool {
	if !y.Estimated {
		y.Demand = satAdd(y.Demand, perSecond(1, p.interval()))
	}
	hi := p.targetBeside(rTot, o, cur, y)
	return y.Rate > satAdd(hi, mulDiv(y.Rate, p.hysteresis(), milli))
}

// targetBeside is y's target with its demand as it is, where o are the sums
// of the others of cur, the client being divided, and count y (y's own
// sums have cur in y's place).
func (p Policy) targetBeside(rTot uint64, o othersUse, cur, y ClientState) uint64 {
	if !y.Estimated {
		o.measured--
		o.sumDemand -= min(o.sumDemand, y.Demand)
	}
	if !cur.Estimated {
		o.measured++
		o.sumDemand = satAdd(o.sumDemand, cur.Demand)
	}
	return p.target(o, rTot, y)
}

// nextAnswer is the first moment from on when the next report of an
// unexpired client counting a rate, other than entry self of clients, for
// which frees is true, has been answered (grace after it arrives), zero
// when there is none. A client reports every interval from its last recorded
// report, which may be several intervals old (reports that changed nothing
// are kept unwritten, see Request.Quiet): its next answer is the first
// reported + m·interval + grace (m ≥ 1) at or after from. One that stopped
// reporting only costs a re-check that finds no more room. The arithmetic
// is on Unix nanoseconds: it runs once per client.
func nextAnswer(now, from time.Time, clients *Clients, self int, interval, grace time.Duration, frees func(ClientState) bool) time.Time {
	f, iv, best := from.UnixNano(), int64(interval), int64(0)
	for i := range clients.states {
		c := &clients.states[i]
		if i == self || c.Reported.IsZero() || !c.Expires.After(now) {
			continue
		}
		if rate, _ := c.Counted(now); rate == 0 {
			continue // its report frees nothing
		}
		t := answerAt(f, c.Reported.UnixNano(), iv, int64(grace))
		if (best == 0 || t < best) && frees(*c) {
			best = t
		}
	}
	if best == 0 {
		return time.Time{}
	}
	return from.Add(time.Duration(best - f)) // in from's location, as Recheck's other times
}

// measure is the client's state with r's demand: (allowed+denied)/elapsed.
// A client with no report with an elapsed time yet (the immediate report of
// a new bucket says 0 s) is Estimated; a known client reporting no elapsed
// time (a re-check) keeps its last measure. The share fields are prev's,
// without a decrease in flight (the last one is in force by now).
func (p Policy) measure(now time.Time, prev ClientState, known bool, r Report) (ClientState, time.Duration) {
	cur := prev
	cur.PrevRate, cur.PrevBurst, cur.PrevUntil = 0, 0, time.Time{}
	el := r.Elapsed
	if el > 0 {
		// Envoy truncates the elapsed time to whole seconds (a bucket's
		// first report after 1.9 s says 1 s); the time between two reports
		// as the ledger saw them is closer when it agrees.
		if m := now.Sub(prev.Reported); known && !prev.Reported.IsZero() && m >= el && m < el+time.Second+p.grace() {
			el = m
		}
		n := satAdd(r.Allowed, r.Denied)
		d := perSecond(n, el)
		if known && !prev.Estimated && steady(n, mulDiv(prev.Demand, uint64(el), PerSecond*uint64(time.Second))) {
			// Within the counting noise of the last measure: average the
			// two, so that a Poisson count (an Envoy behind a random load
			// balancer sees one) moves the share less from report to
			// report; each replacement of an Envoy token bucket loses its
			// fraction of a token.
			d = d/2 + prev.Demand/2
		}
		cur.Demand = d
		cur.Estimated = false
	} else if !known {
		cur.Demand, cur.Estimated = 0, true
	}
	return cur, el
}

// perSecond is n requests over el as a rate in the unit of PerSecond.
func perSecond(n uint64, el time.Duration) uint64 {
	return mulDiv(n, PerSecond*uint64(time.Second), uint64(el))
}

// target is the client cur's target rate beside o: r·(d_i + φ)/(D + n·φ)
// with φ = max(D, r)/(floorDiv·n), or below the limit (D < r) d_i plus an
// even part of the room no one asks for, (r − D)/n, when that is more (a
// client whose last reports were idle still gets its part). A client whose
// demand is Estimated is taken to want the measured clients' average (all
// of r when none is measured). A measured client's target is at most
// d_i + h_i + φ with headroom h_i = max(d_i, noise(d_i)): a bucket used
// below its limit leaves room for newcomers, while a client may double its
// rate at every report, and one of a few requests a report keeps room for
// its counts' noise (an Envoy behind a random load balancer counts a
// Poisson number, and at 2·d_i + φ one whose idle reports averaged its
// demand down would be held under its own rate; docs/rlqs.md, step 3).
// When D ≥ r the proportional term is the smaller for every client
// whose headroom is its demand (r·(d_i+φ)/(D+nφ) ≤ d_i + φ), so a busy
// fleet's division is unchanged.
func (p Policy) target(o othersUse, rTot uint64, cur ClientState) uint64 {
	measured, sumDemand := o.measured, o.sumDemand
	if !cur.Estimated {
		measured++
		sumDemand = satAdd(sumDemand, cur.Demand)
	}
	n := o.live + 1
	guess := rTot
	if measured > 0 {
		guess = sumDemand / measured
	}
	demand := cur.Demand
	if cur.Estimated {
		demand = guess
	}
	total := satAdd(sumDemand, mulSat(guess, n-measured))
	phi := max(total, rTot)/(floorDiv*n) + 1
	t := min(mulDiv(rTot, satAdd(demand, phi), satAdd(total, mulSat(phi, n))), rTot)
	if total < rTot {
		t = max(t, satAdd(demand, (rTot-total)/n))
	}
	if !cur.Estimated {
		head := max(cur.Demand, p.noise(cur.Demand))
		t = min(t, satAdd(satAdd(cur.Demand, head), phi))
	}
	return t
}

// noise is the counting noise of a client of demand d over one report
// interval, as a rate: 2√c + 1 requests over the interval, c = d × the
// interval being the count it expects (twice a Poisson count's deviation,
// and one for Envoy's whole counts).
func (p Policy) noise(d uint64) uint64 {
	iv := uint64(p.interval())
	milliCount := mulDiv(d, iv, PerSecond*uint64(time.Second)/milli)  // c in thousandths
	req := satAdd(mulSat(2, isqrt(mulSat(milliCount, milli))), milli) // 2√c + 1, in thousandths
	return mulDiv(req, PerSecond*uint64(time.Second)/milli, iv)
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// Keeps reports whether a ledger may leave q's share unwritten (see
// Request.Quiet): q is Quiet, the client is known, its share did not
// change, and the assignment Envoy holds, which lapses Grace before the
// entry's Expires, holds at least q.Hold past now.
func (p Policy) Keeps(now time.Time, q *Request, prev ClientState, known bool, share Share) bool {
	return q.Quiet && known && !share.Changed && prev.Expires.Add(-p.grace()).After(now.Add(q.Hold))
}

// Kept is share as answered for a request Keeps leaves unwritten: Kept,
// expiring when the assignment the client holds does.
func (p Policy) Kept(prev ClientState, share Share) Share {
	share.Expires = prev.Expires.Add(-p.grace())
	share.Kept = true
	return share
}

// isqrt is ⌊√n⌋.
func isqrt(n uint64) uint64 {
	x := uint64(math.Sqrt(float64(n)))
	for x*x > n {
		x--
	}
	for (x+1)*(x+1) <= n {
		x++
	}
	return x
}

// steady reports whether a count n is within twice the Poisson noise of m,
// the count the last measure expected over the same time.
func steady(n, m uint64) bool {
	lo, hi := min(n, m), max(n, m)
	return hi-lo <= 1+2*isqrt(hi)
}
