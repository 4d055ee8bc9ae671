package rlqs

import (
	"context"
	"sync"
	"time"
)

// sweepEvery is how many Assigns pass between sweeps of a Memory's
// buckets, which drop expired clients and empty buckets no report visits
// any more.
const sweepEvery = 4096

// Memory is a Ledger for a single replica: the state lives in this
// process. It is safe for concurrent use.
type Memory struct {
	policy Policy

	mu      sync.Mutex
	buckets map[string]*Clients
	calls   int
}

// NewMemory returns an empty Memory dividing by p.
func NewMemory(p Policy) *Memory {
	return &Memory{policy: p, buckets: make(map[string]*Clients)}
}

// Assign implements Ledger. It never fails.
func (m *Memory) Assign(_ context.Context, now time.Time, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range reqs {
		out[i].Share = m.assign(now, &reqs[i])
	}
	return out
}

func (m *Memory) assign(now time.Time, q *Request) Share {
	m.calls++
	if m.calls%sweepEvery == 0 {
		m.sweep(now)
	}
	b := m.buckets[q.Key]
	if b == nil {
		b = new(Clients)
		m.buckets[q.Key] = b
	}
	self, prev := b.Lookup(q.Report.Client)
	share, cur, expired := m.policy.Divide(now, q.Fleet, b, self, q.Report, q.TTL)
	if m.policy.Keeps(now, q, prev, self >= 0, share) {
		share = m.policy.Kept(prev, share)
	} else {
		b.Set(q.Report.Client, cur)
	}
	for _, id := range expired {
		b.Delete(id)
	}
	return share
}

// sweep drops every expired client and every bucket left empty.
func (m *Memory) sweep(now time.Time) {
	for key, b := range m.buckets {
		b.DeleteExpired(now)
		if b.Len() == 0 {
			delete(m.buckets, key)
		}
	}
}

// Clients returns a copy of the state of key's clients, for tests and
// debugging.
func (m *Memory) Clients(key string) map[string]ClientState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]ClientState)
	if b := m.buckets[key]; b != nil {
		for id, c := range b.All() {
			out[id] = c
		}
	}
	return out
}
