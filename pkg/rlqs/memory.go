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
	buckets map[string]map[string]ClientState
	calls   int
}

// NewMemory returns an empty Memory dividing by p.
func NewMemory(p Policy) *Memory {
	return &Memory{policy: p, buckets: make(map[string]map[string]ClientState)}
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
		b = make(map[string]ClientState)
		m.buckets[q.Key] = b
	}
	prev, known := b[q.Report.Client]
	delete(b, q.Report.Client)
	share, cur, expired := m.policy.Divide(now, q.Fleet, b, prev, known, q.Report, q.TTL)
	for _, id := range expired {
		delete(b, id)
	}
	if m.policy.Keeps(now, q, prev, known, share) {
		b[q.Report.Client] = prev
		return m.policy.Kept(prev, share)
	}
	b[q.Report.Client] = cur
	return share
}

// sweep drops every expired client and every bucket left empty.
func (m *Memory) sweep(now time.Time) {
	for key, b := range m.buckets {
		for id, c := range b {
			if !c.Expires.After(now) {
				delete(b, id)
			}
		}
		if len(b) == 0 {
			delete(m.buckets, key)
		}
	}
}

// Clients returns a copy of the state of key's clients, for tests and
// debugging.
func (m *Memory) Clients(key string) map[string]ClientState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]ClientState, len(m.buckets[key]))
	for id, c := range m.buckets[key] {
		out[id] = c
	}
	return out
}
