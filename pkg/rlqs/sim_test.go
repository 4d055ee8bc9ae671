package rlqs_test

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/envoyrlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// The simulation drives the ledger and Strategy with Envoy 1.40 clients
// (envoyrlqs) on an injected clock: each client is one Envoy with one
// bucket, reports every reportEvery from the bucket's creation, and
// receives each answer after its own delay. It records every admission.

const reportEvery = 5 * time.Second

var simStart = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// clientSpec is one simulated Envoy.
type clientSpec struct {
	name string
	join time.Duration
	// demand is the client's request rate (per second) at a time since the
	// start; requests are evenly spaced at that rate.
	demand func(at time.Duration) float64
	// down lists periods in which the client's stream is broken: reports
	// are lost (Envoy still resets its counts), answers do not arrive, and
	// the first report after a period opens a new stream (a new client).
	down  [][2]time.Duration
	delay time.Duration // from a report to its answer's arrival
}

type scenario struct {
	name    string
	fleet   func(at time.Duration) rlqs.Fleet
	clients []clientSpec
	dur     time.Duration
	ttl     time.Duration
	// settle is how long after a limit change the old limit still bounds
	// the fleet (the intervals that overlap it are checked against the
	// larger of the two).
	changes []time.Duration
	// full, when not 0, is the time from which every 20 s window (apart
	// from those a limit change unsettles) must admit ≥ 90% of the fleet's
	// rate: the demand is at least 3× the limit throughout.
	full      time.Duration
	trace     bool // log every report and its answer
	noRecheck bool // the server ignores Share.Recheck
}

func constant(rate float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return rate }
}

func steps(rates ...float64) func(time.Duration) float64 { // rates[i] for [i·20 s, (i+1)·20 s)
	return func(at time.Duration) float64 {
		i := int(at / (20 * time.Second))
		return rates[min(i, len(rates)-1)]
	}
}

func fixedFleet(f rlqs.Fleet) func(time.Duration) rlqs.Fleet {
	return func(time.Duration) rlqs.Fleet { return f }
}

// event kinds, in the order they run at one instant: answers arrive, then
// the server's re-checks (Share.Recheck), reports, requests.
const (
	evDeliver = iota
	evRecheck
	evReport
	evRequest
)

type event struct {
	at     time.Time
	kind   int
	client int
	seq    int
	action *rlqsv3.RateLimitQuotaResponse_BucketAction
	stream int // the stream an answer was sent on
}

type events []*event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type simClient struct {
	spec    clientSpec
	b       *envoyrlqs.Bucket
	stream  int                       // current stream number; a new one after each down period
	wasDown bool                      // the last report was lost
	held    *typev3.RateLimitStrategy // what the server sent on this stream
	ledger  rlqs.Ledger
}

// result is what a run measured.
type result struct {
	admitted  []int64    // admission times, ns since the start, sorted
	injected  [][2]int64 // (time ns, tokens·1000) of tokens gained at once
	maxExcess uint64     // max over time of (Σ max_tokens in force − B)⁺
	floors    int        // most clients at once
	requests  int
}

// run simulates s against ledgers (client i uses ledgers[i%len]) and
// checks, at every answer, that the rates Envoy applies sum to at most the
// fleet's rate.
func run(t *testing.T, s scenario, ledgers []rlqs.Ledger) result {
	t.Helper()
	ctx := context.Background()
	const key = "bucket"
	settings := envoyrlqs.Settings{NoAssignment: envoyrlqs.Blanket(typev3.RateLimitStrategy_DENY_ALL)}
	var h events
	seq := 0
	push := func(e *event) { seq++; e.seq = seq; heap.Push(&h, e) }
	clients := make([]*simClient, len(s.clients))
	for i, spec := range s.clients {
		b, err := envoyrlqs.New(settings)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = &simClient{spec: spec, b: b, ledger: ledgers[i%len(ledgers)]}
		push(&event{at: simStart.Add(spec.join), kind: evRequest, client: i})
	}
	var res result
	end := simStart.Add(s.dur)
	down := func(c *simClient, at time.Time) bool {
		for _, p := range c.spec.down {
			if !at.Before(simStart.Add(p[0])) && at.Before(simStart.Add(p[1])) {
				return true
			}
		}
		return false
	}
	// assign is the server's side of one report (or re-check) on the
	// client's current stream: the ledger's share, sent as a strategy that
	// arrives after the client's delay.
	assign := func(i int, now time.Time, u envoyrlqs.Usage) {
		c := clients[i]
		r := rlqs.Report{Client: fmt.Sprintf("%s#%d", c.spec.name, c.stream), Allowed: u.Allowed, Denied: u.Denied, Elapsed: u.Elapsed}
		f := s.fleet(now.Sub(simStart))
		share, err := c.ledger.Assign(ctx, now, key, f, r, s.ttl)
		if err != nil {
			t.Fatalf("Assign at %v: %v", now.Sub(simStart), err)
		}
		st := rlqs.Strategy(share, c.held)
		c.held = st
		if s.trace {
			t.Logf("%v %s %+v -> %+v %v", now.Sub(simStart), r.Client, u, share, st)
		}
		push(&event{at: now.Add(c.spec.delay), kind: evDeliver, client: i, action: envoyrlqs.Assign(st, s.ttl), stream: c.stream})
		if !share.Recheck.IsZero() && !s.noRecheck {
			push(&event{at: share.Recheck, kind: evRecheck, client: i, stream: c.stream})
		}
	}
	report := func(i int, now time.Time, u envoyrlqs.Usage) {
		c := clients[i]
		if down(c, now) {
			c.wasDown = true
			return
		}
		if c.wasDown {
			c.wasDown = false
			c.stream++
			c.held = nil // a new stream: the server knows nothing of it
		}
		assign(i, now, u)
	}
	bound := func(at time.Duration) uint64 {
		r := rlqs.FleetMilliRate(s.fleet(at))
		for _, ch := range s.changes {
			// Old shares last until every client has reported once
			// after the change and the answers have arrived.
			if at >= ch && at < ch+reportEvery+time.Second+100*time.Millisecond {
				r = max(r, rlqs.FleetMilliRate(s.fleet(ch-time.Nanosecond)))
			}
		}
		return r
	}
	checkRates := func(now time.Time) {
		var sum, sumMax uint64
		for _, c := range clients {
			st := c.b.Assignment(now)
			if st == nil {
				continue // DENY_ALL by no_assignment_behavior
			}
			r := rlqs.StrategyMilliRate(st)
			if r == math.MaxUint64 {
				t.Fatalf("at %v client %s runs an unbounded strategy %v", now.Sub(simStart), c.spec.name, st)
			}
			sum += r
			sumMax += uint64(st.GetTokenBucket().GetMaxTokens())
		}
		if b := bound(now.Sub(simStart)); sum > b {
			t.Fatalf("at %v Envoy's rates sum to %d thousandths/s, above the fleet's %d", now.Sub(simStart), sum, b)
		}
		if burst := s.fleet(now.Sub(simStart)).Burst; sumMax > burst {
			res.maxExcess = max(res.maxExcess, sumMax-burst)
		}
	}
	for h.Len() > 0 {
		e := heap.Pop(&h).(*event)
		if !e.at.Before(end) {
			break
		}
		c := clients[e.client]
		before := c.b.Stats().Injected
		switch e.kind {
		case evDeliver:
			if down(c, e.at) || e.stream != c.stream {
				break // lost with its stream
			}
			c.b.Apply(e.at, e.action)
			checkRates(e.at)
		case evRecheck:
			if !down(c, e.at) && e.stream == c.stream {
				assign(e.client, e.at, envoyrlqs.Usage{})
			}
		case evReport:
			if u, ok := c.b.Usage(e.at); ok {
				report(e.client, e.at, u)
			}
			push(&event{at: e.at.Add(reportEvery), kind: evReport, client: e.client})
		case evRequest:
			rate := c.spec.demand(e.at.Sub(simStart))
			if rate <= 0 {
				push(&event{at: e.at.Add(time.Second), kind: evRequest, client: e.client}) // idle: look again later
				break
			}
			res.requests++
			if c.b.Decide(e.at) {
				res.admitted = append(res.admitted, int64(e.at.Sub(simStart)))
			}
			if u, ok := c.b.Subscription(); ok {
				report(e.client, e.at, u)
				push(&event{at: e.at.Add(reportEvery), kind: evReport, client: e.client})
			}
			push(&event{at: e.at.Add(time.Duration(float64(time.Second) / rate)), kind: evRequest, client: e.client})
		}
		if gain := c.b.Stats().Injected - before; gain > 0 {
			res.injected = append(res.injected, [2]int64{int64(e.at.Sub(simStart)), int64(math.Ceil(gain * 1000))})
		}
	}
	res.floors = len(clients)
	return res
}
