package rlqs

import (
	"math"
	"slices"
	"time"
)

// clientSum is what scan finds over every entry of a Clients at one
// instant, kept from one division to the next: a division then subtracts
// its own client's part instead of reading every entry, which at hundreds
// of clients a bucket was most of a report's CPU.
//
// An entry's part changes with time only when its share lapses (Expires) or
// a decrease in flight stops counting (PrevUntil). The sum is taken at `at`,
// with the decreases in flight then (flight), which a later instant takes
// off once they end; Set and Delete update it in place. It holds until the
// first lapse (lapseBound), when it is taken again over every entry. It is also
// dropped (ok false), to be taken again, when an update cannot be made
// exactly: an entry that lapsed, or a sum reaching the saturation of
// satAdd. The earliest lapse and the last end of a decrease in flight, a
// minimum and a maximum that a departing entry cannot be subtracted from,
// are not kept: only a capped client's re-check needs them (Clients.times).
type clientSum struct {
	ok bool
	at time.Time
	// lapseBound is no later than any entry's lapse: an entry refreshed
	// since the sum was taken does not raise it.
	lapseBound time.Time
	flight     []flightEnd // the decreases in flight at `at`, of the entries as they are now
	o          othersUse   // over every entry; o.expired is never set (lapsed makes the sum unusable)
	lapsed     bool        // an entry had lapsed at `at`: scan reads every entry
}

// flightEnd is an entry's decrease in flight: when it stops counting, and
// what that takes off the counted rate and burst.
type flightEnd struct {
	id          string
	at          time.Time
	rate, burst uint64
}

// part is one entry's contribution to othersUse at now.
type part struct {
	lapsed            bool
	measured          bool
	demand            uint64
	rate, burst       uint64 // counted
	freed, freedBurst uint64 // what its decrease in flight frees, 0 when none
	inFlight          bool
	prevUntil, lapse  time.Time
}

func partOf(c *ClientState, now time.Time) part {
	if !c.Expires.After(now) {
		return part{lapsed: true}
	}
	p := part{measured: !c.Estimated, demand: c.Demand, rate: c.Rate, burst: c.Burst, lapse: c.Expires}
	if c.PrevUntil.After(now) {
		p.rate, p.burst = max(p.rate, c.PrevRate), max(p.burst, c.PrevBurst)
		p.freed, p.freedBurst, p.inFlight, p.prevUntil = p.rate-c.Rate, p.burst-c.Burst, true, c.PrevUntil
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

// sumAt returns the sums of every entry of cs at now: the kept ones, less
// the decreases in flight that stopped counting by now; ok false when they
// cannot say (an entry had lapsed, a sum saturated, or now is before the
// instant they were taken at: reports of one bucket from several streams
// take their `now` before they take turns at the bucket), and scan reads
// every entry. They are taken again over every entry at the first lapse.
func (cs *Clients) sumAt(now time.Time) (o othersUse, ok bool) {
	s := &cs.sum
	if !s.ok || !now.Before(s.lapseBound) {
		*s = clientSum{ok: true, at: now, lapseBound: time.Unix(0, math.MaxInt64), flight: s.flight[:0]}
		for i := range cs.states {
			p := partOf(&cs.states[i], now)
			if p.lapsed {
				s.lapsed = true
				continue
			}
			s.add(cs.ids[i], p)
		}
	}
	if s.lapsed || now.Before(s.at) || s.o.saturated() {
		return othersUse{}, false
	}
	o = s.o
	for _, f := range s.flight {
		if !f.at.After(now) {
			o.usedRate -= f.rate
			o.usedBurst -= f.burst
			o.freedRate -= f.rate
		}
	}
	return o, true
}

// add adds id's part p.
func (s *clientSum) add(id string, p part) {
	s.o.add(p)
	if p.lapse.Before(s.lapseBound) {
		s.lapseBound = p.lapse
	}
	if p.inFlight {
		s.flight = append(s.flight, flightEnd{id: id, at: p.prevUntil, rate: p.freed, burst: p.freedBurst})
	}
}

// update replaces id's old state (nil for a new entry) by new (nil for a
// deleted one) in the kept sum, or drops the sum when that cannot be done
// exactly.
func (cs *Clients) update(id string, old, new *ClientState) {
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
		if p.inFlight {
			i := slices.IndexFunc(s.flight, func(f flightEnd) bool { return f.id == id })
			if i < 0 {
				s.ok = false
				return
			}
			s.flight = slices.Delete(s.flight, i, i+1)
		}
	}
	if new != nil {
		p := partOf(new, s.at)
		if p.lapsed {
			s.ok = false
			return
		}
		s.add(id, p)
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
