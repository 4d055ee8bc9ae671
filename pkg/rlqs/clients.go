package rlqs

import (
	"iter"
	"slices"
	"time"
)

// Clients is the state of one bucket's clients, each under its id (the
// Report.Client of its reports). The states are held contiguously, so that
// Divide, which sums every other client of the bucket at each report and
// re-check, walks a slice rather than a map. An entry is found by id in
// O(1); Set appends a new id's entry, and Delete moves the last entry into
// the deleted one's place, so an index holds until the next Delete and the
// entries are in no particular order.
//
// The zero value is an empty set ready to use. A Clients is not safe for
// concurrent use: a ledger holds the bucket's lock around every use.
type Clients struct {
	ids    []string
	states []ClientState
	index  map[string]int // ids[index[id]] == id
	sum    clientSum      // the entries' sums for scan, kept between divisions
}

// Len is the number of clients.
func (cs *Clients) Len() int { return len(cs.ids) }

// Lookup is the index of id's entry and its state; -1 and the zero state
// when it has none.
func (cs *Clients) Lookup(id string) (int, ClientState) {
	if i, ok := cs.index[id]; ok {
		return i, cs.states[i]
	}
	return -1, ClientState{}
}

// Grow makes room for n more clients, so that Setting them allocates
// little more (for an empty set, nothing more).
func (cs *Clients) Grow(n int) {
	if cs.index == nil {
		cs.index = make(map[string]int, n)
	}
	cs.ids = slices.Grow(cs.ids, n)
	cs.states = slices.Grow(cs.states, n)
}

// Set makes c the state of id, adding an entry when it has none.
func (cs *Clients) Set(id string, c ClientState) {
	if i, ok := cs.index[id]; ok {
		cs.update(id, &cs.states[i], &c)
		cs.states[i] = c
		return
	}
	cs.update(id, nil, &c)
	if cs.index == nil {
		cs.index = make(map[string]int)
	}
	cs.index[id] = len(cs.ids)
	cs.ids = append(cs.ids, id)
	cs.states = append(cs.states, c)
}

// Delete removes id's entry, if any; the last entry takes its index.
func (cs *Clients) Delete(id string) {
	i, ok := cs.index[id]
	if !ok {
		return
	}
	cs.update(id, &cs.states[i], nil)
	last := len(cs.ids) - 1
	if i != last {
		cs.ids[i], cs.states[i] = cs.ids[last], cs.states[last]
		cs.index[cs.ids[i]] = i
	}
	cs.ids[last], cs.states[last] = "", ClientState{} // no stale id kept alive
	cs.ids, cs.states = cs.ids[:last], cs.states[:last]
	delete(cs.index, id)
}

// DeleteExpired removes every client whose share has expired at now (its
// Expires not after now): those Divide would leave out.
func (cs *Clients) DeleteExpired(now time.Time) {
	// Backwards, so the entry Delete moves into i has been looked at.
	for i := len(cs.states) - 1; i >= 0; i-- {
		if !cs.states[i].Expires.After(now) {
			cs.Delete(cs.ids[i])
		}
	}
}

// All yields every client's id and state, in the order of their indexes.
// The set must not change while it runs.
func (cs *Clients) All() iter.Seq2[string, ClientState] {
	return func(yield func(string, ClientState) bool) {
		for i, id := range cs.ids {
			if !yield(id, cs.states[i]) {
				return
			}
		}
	}
}
