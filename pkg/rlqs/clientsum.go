package rlqs

import (
	"math"
	"time"
)

// clientSum is what scan finds over every entry of a Clients at one
// instant, kept from one division to the next: a division then subtracts
// its own client's part instead of reading every entry, which at hundreds
// of clients a bucket was most of a report's CPU.
//
// An entry's part changes with time only when its share lapses (Expires) or
// a decrease in flight stops counting (PrevUntil). The sum is taken at `at`
// and holds for any instant in [at, until), until being the first such
// change after `at` of any entry; Set and Delete update it in place. It is
// dropped (ok false), to be taken again over every entry, when an update
// cannot be made exactly: an entry that lapsed, or a sum reaching the
// saturation of satAdd. The earliest lapse and the last end of a decrease
// in flight, a minimum and a maximum that a departing entry cannot be
// subtracted from, are not kept: only a capped client's re-check needs them
// (Clients.times).
type clientSum struct {
	ok        bool
	at, until time.Time
	o         othersUse // over every entry; o.expired is never set (lapsed makes the sum unusable)
	lapsed    bool      // an entry had lapsed at `at`: scan reads every entry
}

// part is one entry's contribution to othersUse at now.
type part struct {
	lapsed           bool
	measured         bool
	demand           uint64
	rate, burst      uint64 // counted
	freed            uint64 // the rate its decrease in flight frees, 0 when none
	inFlight         bool
	prevUntil, lapse time.Time
}

func partOf(c *ClientState, now time.Time) part {
	if !c.Expires.After(now) {
		return part{lapsed: true}
	}
	p := part{measured: !c.Estimated, demand: c.Demand, rate: c.Rate, burst: c.Burst, lapse: c.Expires}
	if c.PrevUntil.After(now) {
		p.rate, p.burst = max(p.rate, c.PrevRate), max(p.burst, c.PrevBurst)
		p.freed, p.inFlight, p.prevUntil = p.rate-c.Rate, true, c.PrevUntil
	}
	return p
}

// add adds p to o (as scan does for an unexpired entry).
func (o *othersUse) add(p part) {
	if p.inFlight {
		o.freedRate = satAdd(o.freedRate, p.freed)
	}
	o.live++
	if p.measured {
		o.measured++
		o.sumDemand = satAdd(o.sumDemand, p.demand)
	}
	o.usedRate = satAdd(o.usedRate, p.rate)
	o.usedBurst = satAdd(o.usedBurst, p.burst)
}

// sub takes p out of o, and reports false when it cannot be done exactly:
// a sum has saturated, so it no longer says what was added.
func (o *othersUse) sub(p part) bool {
	if o.saturated() {
		return false
	}
	if p.inFlight {
		o.freedRate -= p.freed
	}
	o.live--
	if p.measured {
		o.measured--
		o.sumDemand -= p.demand
	}
	o.usedRate -= p.rate
	o.usedBurst -= p.burst
	return true
}

func (o *othersUse) saturated() bool {
	return o.sumDemand == math.MaxUint64 || o.usedRate == math.MaxUint64 ||
		o.usedBurst == math.MaxUint64 || o.freedRate == math.MaxUint64
}

// changes is the first moment after at when p's entry changes its part: its
// lapse, or the end of its decrease in flight.
func (p part) changes() time.Time {
	if p.inFlight && p.prevUntil.Before(p.lapse) {
		return p.prevUntil
	}
	return p.lapse
}

// sumAt returns the sum of every entry of cs valid at now, taking it again
// over every entry when the kept one is not.
func (cs *Clients) sumAt(now time.Time) *clientSum {
	s := &cs.sum
	if s.ok && !now.Before(s.at) && now.Before(s.until) {
		return s
	}
	*s = clientSum{ok: true, at: now}
	for i := range cs.states {
		p := partOf(&cs.states[i], now)
		if p.lapsed {
			s.lapsed = true
			continue
		}
		s.o.add(p)
		if ch := p.changes(); s.until.IsZero() || ch.Before(s.until) {
			s.until = ch
		}
	}
	if s.until.IsZero() {
		s.until = time.Unix(0, math.MaxInt64) // no entry: nothing changes
	}
	return s
}

// update replaces old (nil for a new entry) by new (nil for a deleted one)
// in the kept sum, or drops the sum when that cannot be done exactly.
func (cs *Clients) update(old, new *ClientState) {
	s := &cs.sum
	if !s.ok {
		return
	}
	if old != nil {
		p := partOf(old, s.at)
		if p.lapsed || !s.o.sub(p) {
			s.ok = false
			return
		}
	}
	if new != nil {
		p := partOf(new, s.at)
		if p.lapsed {
			s.ok = false
			return
		}
		s.o.add(p)
		if ch := p.changes(); ch.Before(s.until) {
			s.until = ch
		}
		if s.o.saturated() {
			s.ok = false
		}
	}
}

// times is, over the unexpired entries but self at now, the first moment a
// share lapses and the last moment a decrease in flight stops counting;
// zero when there is none.
func (cs *Clients) times(now time.Time, self int) (lapse, freedLast time.Time) {
	for i := range cs.states {
		c := &cs.states[i]
		if i == self || !c.Expires.After(now) {
			continue
		}
		if lapse.IsZero() || c.Expires.Before(lapse) {
			lapse = c.Expires
		}
		if c.PrevUntil.After(now) && c.PrevUntil.After(freedLast) {
			freedLast = c.PrevUntil
		}
	}
	return lapse, freedLast
}
