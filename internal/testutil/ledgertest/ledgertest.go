// Package ledgertest runs an rlqs.Ledger against simulated Envoy 1.40
// clients (envoyrlqs) on an injected clock, and checks the guarantee
// docs/rlqs.md states: the fleet bound on every interval, and the
// utilization at three times the limit. The same scenarios run on the
// memory ledger and on Redis ledgers sharing one budget.
package ledgertest

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/envoyrlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// The simulation drives the ledger and Strategy with Envoy 1.40 clients
// (envoyrlqs) on an injected clock: each client is one Envoy with one
// bucket, reports every ReportEvery from the bucket's creation, and
// receives each answer after its own delay. It records every admission.

// ReportEvery is Envoy 1.40's report interval, whatever the config says.
const ReportEvery = 5 * time.Second

// Start is the simulated clock's time 0.
var Start = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// ClientSpec is one simulated Envoy.
type ClientSpec struct {
	Name string
	Join time.Duration // its first request
	// Demand is the client's request rate (per second) at a time since the
	// start; requests are evenly spaced at that rate, or, with Poisson, at
	// random: what each of n Envoys sees when a load balancer sends every
	// request to one of them at random (kube-proxy, new connections).
	Demand  func(at time.Duration) float64
	Poisson bool
	// Down lists periods in which the client's stream is broken: reports
	// are lost (Envoy still resets its counts), answers do not arrive, and
	// the first report after a period opens a new stream (a new client).
	Down  [][2]time.Duration
	Delay time.Duration // from a report to its answer's arrival
}

// Scenario is one simulated fleet: its clients, the rule's Fleet over
// time, and what to check.
type Scenario struct {
	Name    string
	Fleet   func(at time.Duration) rlqs.Fleet
	Clients []ClientSpec
	Dur     time.Duration // simulated time
	TTL     time.Duration // assignment_time_to_live
	// Changes are the times Fleet changes; until Settling after each, the
	// larger of the two limits bounds the fleet.
	Changes []time.Duration
	// Full, when not 0, is the time from which every 20 s window (apart
	// from those a limit change unsettles) must admit ≥ 90% of the fleet's
	// rate: the demand is at least 3× the limit throughout.
	Full time.Duration
	// Least, when not 0, replaces the 20 s windows of Full for a slow rule
	// (a window of an hour or a day): the run from Full to its end must
	// admit at least Least of the fleet's rate over that time.
	Least float64
	// ZeroElapsedAs, when not 0, is what the server passes the ledger for
	// a report whose time_elapsed is 0 with counts (a server may read a
	// subscription as 1 s instead of passing 0 on).
	ZeroElapsedAs time.Duration
	// MaxInjected, when not 0, is the most tokens the clients may gain at
	// once (new buckets, max_tokens growing) over the whole run: E_jump,
	// which a share flipping between DENY_ALL and a token bucket would
	// raise at every flip.
	MaxInjected uint64
	// Window, when not 0, replaces the 20 s windows of Full (a rule of a
	// minute is checked on its own windows), and Floor, when not 0, its
	// 90%.
	Window time.Duration
	Floor  float64
	// Under, when not 0, is the time from which no request may be denied
	// (at most the fraction Denials of them, when not 0): the demand stays
	// under the limit, and a bucket under its limit is never denied once
	// its clients have reported.
	Under   time.Duration
	Denials float64
	Seed    uint64 // of the Poisson arrivals
	// Quiet makes the server's periodic requests Quiet, as pkg/rlqs's
	// stream does for a bucket holding a token bucket: a share the ledger
	// keeps is not written, and nothing is sent (Envoy's assignment holds).
	Quiet     bool
	Trace     bool // log every report and its answer
	NoRecheck bool // the server ignores Share.Recheck
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
	spec    ClientSpec
	b       *envoyrlqs.Bucket
	stream  int                       // current stream number; a new one after each down period
	wasDown bool                      // the last report was lost
	held    *typev3.RateLimitStrategy // what the server sent on this stream
	// recheckAt is the re-check due on this stream (the earliest
	// Share.Recheck not yet run; zero when none): the server keeps one per
	// stream and bucket.
	recheckAt time.Time
	ledger    rlqs.Ledger
}

// Result is what a Run measured.
type Result struct {
	Admitted  []int64    // admission times, ns since the start, sorted
	Injected  [][2]int64 // (time ns, tokens·1000) of tokens gained at once
	MaxExcess uint64     // max over time of (Σ max_tokens in force − B)⁺
	Floors    int        // most clients at once
	Requests  int
	Denied    []int64 // denial times, ns since the start
	Replaced  int     // token buckets Envoy created (new or replacing)
	Floored   float64 // tokens replacements lost to Envoy's rounding down
}

// sim is one Run's state.
type sim struct {
	t       testing.TB
	s       Scenario
	h       events
	seq     int
	clients []*simClient
	res     Result
	rng     *rand.Rand // Poisson arrivals
}

func (m *sim) push(e *event) {
	m.seq++
	e.seq = m.seq
	heap.Push(&m.h, e)
}

// Run simulates s against ledgers (client i uses ledgers[i%len]) and
// checks, at every answer, that the rates Envoy applies sum to at most the
// fleet's rate.
func Run(t testing.TB, s Scenario, ledgers []rlqs.Ledger) Result {
	t.Helper()
	m := &sim{t: t, s: s, clients: make([]*simClient, len(s.Clients)), rng: rand.New(rand.NewPCG(s.Seed, 25))}
	settings := envoyrlqs.Settings{NoAssignment: envoyrlqs.Blanket(typev3.RateLimitStrategy_DENY_ALL)}
	for i, spec := range s.Clients {
		b, err := envoyrlqs.New(settings)
		if err != nil {
			t.Fatal(err)
		}
		m.clients[i] = &simClient{spec: spec, b: b, ledger: ledgers[i%len(ledgers)]}
		m.push(&event{at: Start.Add(spec.Join), kind: evRequest, client: i})
	}
	end := Start.Add(s.Dur)
	for m.h.Len() > 0 {
		e := heap.Pop(&m.h).(*event)
		if !e.at.Before(end) {
			break
		}
		m.step(e)
	}
	m.res.Floors = len(m.clients)
	for _, c := range m.clients {
		st := c.b.Stats()
		m.res.Replaced += st.Replaced
		m.res.Floored += st.Floored
	}
	return m.res
}

// step runs one event and records the tokens it gave an Envoy at once.
func (m *sim) step(e *event) {
	c := m.clients[e.client]
	before := c.b.Stats().Injected
	switch e.kind {
	case evDeliver:
		if m.down(c, e.at) {
			// Lost with its stream: the next report opens a new one, as
			// Envoy reopens a broken stream at its next report.
			c.wasDown = true
			break
		}
		if e.stream != c.stream {
			break // sent on a stream since replaced
		}
		c.b.Apply(e.at, e.action)
		m.checkRates(e.at)
	case evRecheck:
		if !e.at.Equal(c.recheckAt) || e.stream != c.stream {
			break // superseded by an earlier one, or lost with its stream
		}
		c.recheckAt = time.Time{}
		if !m.down(c, e.at) {
			m.assign(e.client, e.at, envoyrlqs.Usage{})
		}
	case evReport:
		if u, ok := c.b.Usage(e.at); ok {
			m.report(e.client, e.at, u)
		}
		m.push(&event{at: e.at.Add(ReportEvery), kind: evReport, client: e.client})
	case evRequest:
		rate := c.spec.Demand(e.at.Sub(Start))
		if rate <= 0 {
			m.push(&event{at: e.at.Add(time.Second), kind: evRequest, client: e.client}) // idle: look again later
			break
		}
		m.res.Requests++
		if c.b.Decide(e.at) {
			m.res.Admitted = append(m.res.Admitted, int64(e.at.Sub(Start)))
		} else {
			m.res.Denied = append(m.res.Denied, int64(e.at.Sub(Start)))
		}
		if u, ok := c.b.Subscription(); ok {
			m.report(e.client, e.at, u)
			m.push(&event{at: e.at.Add(ReportEvery), kind: evReport, client: e.client})
		}
		gap := 1 / rate
		if c.spec.Poisson {
			gap = m.rng.ExpFloat64() / rate
		}
		m.push(&event{at: e.at.Add(time.Duration(gap * float64(time.Second))), kind: evRequest, client: e.client})
	}
	if gain := c.b.Stats().Injected - before; gain > 0 {
		m.res.Injected = append(m.res.Injected, [2]int64{int64(e.at.Sub(Start)), int64(math.Ceil(gain * 1000))})
	}
}

// down reports whether c's stream is broken at at.
func (m *sim) down(c *simClient, at time.Time) bool {
	for _, p := range c.spec.Down {
		if !at.Before(Start.Add(p[0])) && at.Before(Start.Add(p[1])) {
			return true
		}
	}
	return false
}

// report is a report reaching the server, unless the stream is down; the
// first one after a break opens a new stream.
func (m *sim) report(i int, now time.Time, u envoyrlqs.Usage) {
	c := m.clients[i]
	if m.down(c, now) {
		c.wasDown = true
		return
	}
	if c.wasDown {
		c.wasDown = false
		c.stream++
		c.held = nil // a new stream: the server knows nothing of it
		c.recheckAt = time.Time{}
	}
	m.assign(i, now, u)
}

// assign is the server's side of one report (or re-check) on the client's
// current stream: the ledger's share, sent as a strategy that arrives after
// the client's delay.
func (m *sim) assign(i int, now time.Time, u envoyrlqs.Usage) {
	c := m.clients[i]
	r := rlqs.Report{Client: fmt.Sprintf("%s#%d", c.spec.Name, c.stream), Allowed: u.Allowed, Denied: u.Denied, Elapsed: u.Elapsed}
	if r.Elapsed == 0 && r.Allowed+r.Denied > 0 && m.s.ZeroElapsedAs > 0 {
		r.Elapsed = m.s.ZeroElapsedAs
	}
	req := rlqs.Request{Key: "bucket", Fleet: m.s.Fleet(now.Sub(Start)), Report: r, TTL: m.s.TTL}
	if m.s.Quiet && u.Elapsed > 0 && c.held.GetTokenBucket() != nil {
		req.Quiet, req.Hold = true, u.Elapsed+time.Second
	}
	res := c.ledger.Assign(context.Background(), now, []rlqs.Request{req})
	share, err := res[0].Share, res[0].Err
	if err != nil {
		m.t.Fatalf("Assign at %v: %v", now.Sub(Start), err)
	}
	if share.Kept {
		if m.s.Trace {
			m.t.Logf("%v %s %+v -> kept", now.Sub(Start), r.Client, u)
		}
	} else {
		st := rlqs.Strategy(share, c.held)
		c.held = st
		if m.s.Trace {
			m.t.Logf("%v %s %+v -> %+v %v", now.Sub(Start), r.Client, u, share, st)
		}
		m.push(&event{at: now.Add(c.spec.Delay), kind: evDeliver, client: i, action: envoyrlqs.Assign(st, m.s.TTL), stream: c.stream})
	}
	if !share.Recheck.IsZero() && !m.s.NoRecheck && (c.recheckAt.IsZero() || share.Recheck.Before(c.recheckAt)) {
		c.recheckAt = share.Recheck
		m.push(&event{at: share.Recheck, kind: evRecheck, client: i, stream: c.stream})
	}
}

// checkRates checks that the rates Envoy applies at now sum to at most the
// fleet's (the larger limit while a change settles), and records how far
// their max_tokens exceed the burst.
func (m *sim) checkRates(now time.Time) {
	var sum, sumMax uint64
	for _, c := range m.clients {
		st := c.b.Assignment(now)
		if st == nil {
			continue // DENY_ALL by no_assignment_behavior
		}
		r := rlqs.StrategyRate(st)
		if r == math.MaxUint64 {
			m.t.Fatalf("at %v client %s runs an unbounded strategy %v", now.Sub(Start), c.spec.Name, st)
		}
		sum += r
		sumMax += uint64(st.GetTokenBucket().GetMaxTokens())
	}
	f := maxFleet(m.s, now.Sub(Start))
	if b := rlqs.FleetRate(f); sum > b {
		m.t.Fatalf("at %v Envoy's rates sum to %d, above the fleet's %d (%d a second)", now.Sub(Start), sum, b, rlqs.PerSecond)
	}
	if sumMax > f.Burst {
		m.res.MaxExcess = max(m.res.MaxExcess, sumMax-f.Burst)
	}
}

// tokenFleet is a token_bucket rule of 10 per second with a burst of 20.
var tokenFleet = rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 20}

// Named returns the Scenarios of these names, in this order, and fails t
// when one is missing, so a test that picks scenarios by name cannot
// quietly run none of them after a rename.
func Named(t testing.TB, names ...string) []Scenario {
	t.Helper()
	all := Scenarios()
	out := make([]Scenario, 0, len(names))
	for _, n := range names {
		i := slices.IndexFunc(all, func(sc Scenario) bool { return sc.Name == n })
		if i < 0 {
			t.Fatalf("ledgertest: no scenario %q", n)
		}
		out = append(out, all[i])
	}
	return out
}

// Scenarios are the property test's cases: skewed demand, joins and leaves,
// limit changes, bursts, slow answers, many clients.
func Scenarios() []Scenario {
	const ttl = 15 * time.Second
	rng := rand.New(rand.NewPCG(25, 1))
	many := make([]ClientSpec, 40)
	for i := range many {
		many[i] = ClientSpec{
			Name: fmt.Sprintf("e%d", i), Join: time.Duration(rng.IntN(20_000)) * time.Millisecond,
			Demand: constant(0.05 + rng.Float64()*rng.Float64()*3), Delay: time.Duration(rng.IntN(900)) * time.Millisecond,
		}
	}
	return append([]Scenario{
		{Name: "2:1 at 3x", Fleet: fixedFleet(tokenFleet), Dur: 2 * time.Minute, TTL: ttl, Full: ReportEvery, Clients: []ClientSpec{
			{Name: "a", Demand: constant(20), Delay: 20 * time.Millisecond},
			{Name: "b", Join: 300 * time.Millisecond, Demand: constant(10), Delay: 20 * time.Millisecond},
		}},
		{Name: "100:1 at 3x", Fleet: fixedFleet(tokenFleet), Dur: 2 * time.Minute, TTL: ttl, Full: 2*time.Second + ReportEvery, Clients: []ClientSpec{
			{Name: "a", Demand: constant(29.7), Delay: 5 * time.Millisecond},
			{Name: "b", Join: 2 * time.Second, Demand: constant(0.297), Delay: 5 * time.Millisecond},
		}},
		{Name: "ten equal at 3x", Fleet: fixedFleet(tokenFleet), Dur: 2 * time.Minute, TTL: ttl, Full: 3933*time.Millisecond + ReportEvery, Clients: func() []ClientSpec {
			cs := make([]ClientSpec, 10)
			for i := range cs {
				cs[i] = ClientSpec{Name: fmt.Sprintf("e%d", i), Join: time.Duration(i) * 437 * time.Millisecond,
					Demand: constant(3), Delay: 10 * time.Millisecond}
			}
			return cs
		}()},
		{Name: "joins and leaves", Fleet: fixedFleet(tokenFleet), Dur: 3 * time.Minute, TTL: ttl, Clients: []ClientSpec{
			{Name: "a", Demand: constant(15), Delay: 10 * time.Millisecond, Down: [][2]time.Duration{{40 * time.Second, 70 * time.Second}}},
			{Name: "b", Demand: steps(5, 5, 20, 20, 0, 0, 10), Delay: 30 * time.Millisecond},
			{Name: "c", Join: 30 * time.Second, Demand: constant(8), Delay: 200 * time.Millisecond,
				Down: [][2]time.Duration{{100 * time.Second, 3 * time.Minute}}},
			{Name: "d", Join: 50 * time.Second, Demand: constant(12), Delay: 50 * time.Millisecond},
		}},
		{Name: "limit changes", Dur: 2 * time.Minute, TTL: ttl, Full: ReportEvery + time.Second, Changes: []time.Duration{40 * time.Second, 80 * time.Second},
			Fleet: func(at time.Duration) rlqs.Fleet {
				switch {
				case at < 40*time.Second:
					return tokenFleet
				case at < 80*time.Second:
					return rlqs.Fleet{Tokens: 4, Period: time.Second, Burst: 8}
				}
				return rlqs.Fleet{Tokens: 20, Period: time.Second, Burst: 40}
			},
			Clients: []ClientSpec{
				{Name: "a", Demand: constant(40), Delay: 10 * time.Millisecond},
				{Name: "b", Join: time.Second, Demand: constant(20), Delay: 10 * time.Millisecond},
			}},
		{Name: "bursts out of phase", Fleet: fixedFleet(tokenFleet), Dur: 2 * time.Minute, TTL: ttl, Clients: []ClientSpec{
			{Name: "a", Demand: steps(50, 0.1, 50, 0.1, 50, 0.1), Delay: 10 * time.Millisecond},
			{Name: "b", Demand: steps(0.1, 50, 0.1, 50, 0.1, 50), Delay: 10 * time.Millisecond},
		}},
		{Name: "window rule 2:1", Fleet: fixedFleet(rlqs.WindowFleet(100, 20*time.Second)), Dur: 2 * time.Minute, TTL: ttl,
			Full: 700*time.Millisecond + ReportEvery, Clients: twoEnvoys(10, 5)},
		{Name: "slow answers", Fleet: fixedFleet(tokenFleet), Dur: 2 * time.Minute, TTL: ttl, Clients: []ClientSpec{
			{Name: "a", Demand: steps(30, 5, 30), Delay: 900 * time.Millisecond},
			{Name: "b", Demand: steps(5, 30, 5), Delay: 900 * time.Millisecond},
			{Name: "c", Join: 10 * time.Second, Demand: constant(10), Delay: 900 * time.Millisecond},
		}},
		{Name: "forty skewed", Fleet: fixedFleet(rlqs.Fleet{Tokens: 30, Period: time.Second, Burst: 30}), Dur: 2 * time.Minute,
			TTL: ttl, Clients: many},
	}, append(append(slowScenarios(ttl), fleetScenarios(ttl)...), randomScenarios(ttl)...)...)
}

// randomScenarios are the Scenarios of test/k8s's keys: a rule of 100 a
// minute, two Envoys.
func randomScenarios(ttl time.Duration) []Scenario {
	perMinute := fixedFleet(rlqs.WindowFleet(100, time.Minute))
	two := func(total float64, poisson bool) []ClientSpec {
		cs := make([]ClientSpec, 2)
		for i := range cs {
			cs[i] = ClientSpec{Name: fmt.Sprintf("k%d", i), Join: time.Duration(i) * 300 * time.Millisecond,
				Demand: constant(total / 2), Poisson: poisson, Delay: 2 * time.Millisecond}
		}
		return cs
	}
	return []Scenario{
		// The hot key: 300 a minute, each request sent to one Envoy at
		// random (kube-proxy, a new connection per request), so each
		// Envoy's arrivals are Poisson and its count per report moves by
		// about its square root. Both Envoys are always denied, so the
		// fleet is full whatever the division, but each replacement of
		// an Envoy's empty bucket loses the fraction of a token it held,
		// so the shares must not chase the noise. 85% over every minute
		// (sliding), as test/k8s asks of its fixed minutes: the Poisson
		// counts leave some minutes under 90%.
		{Name: "random routing at 3x", Fleet: perMinute, Dur: 6 * time.Minute, TTL: ttl, Seed: 1,
			Full: 2 * ReportEvery, Window: time.Minute, Floor: 0.85, Clients: two(5, true)},
		// test/e2e's cold key through a replica's death and a limit that
		// falls: 1 a second in all, under 100 and then 30 per 20 s, at
		// timings where the first Envoy to report after the fall would
		// get only what the other's old share leaves (TestFallUnderLimit
		// draws others).
		FallUnderLimit(65234*time.Millisecond, 49441*time.Millisecond, 51264*time.Millisecond,
			287*time.Millisecond, 273*time.Millisecond, 454*time.Millisecond),
		// The sparse key: 30 a minute, each request sent to one Envoy at
		// random. Under the limit, but each Envoy sees a Poisson 0.25 a
		// second, and three requests close together empty its 2-token
		// bucket, so some are denied (docs/rlqs.md, step 3, has the
		// figures over many seeds). This seed, among the worse, is held
		// to 8%.
		{Name: "random routing under the limit", Fleet: perMinute, Dur: 10 * time.Minute, TTL: ttl, Seed: 2,
			Under: 2 * ReportEvery, Denials: 0.08, Clients: two(0.5, true)},
		// The cold key: 30 a minute on keep-alive connections, each
		// Envoy's requests evenly spaced: never denied once both have
		// reported. (The same rate at random is denied now and then:
		// three requests close together empty a two-token bucket;
		// docs/rlqs.md.)
		{Name: "steady under the limit", Fleet: perMinute, Dur: 6 * time.Minute, TTL: ttl,
			Under: 2 * ReportEvery, Clients: two(0.5, false)},
	}
}

// FallUnderLimit is test/e2e's cold key: two Envoys at 0.5 requests a
// second each, evenly spaced, under a window rule of 100 per 20 s that
// falls to 30 per 20 s at fall; Envoy a's stream breaks from kill to back
// (its replica died; it reopens to the other), each answer arrives after
// dA and dB, and b's first request is at jB. The server keeps reports
// that change nothing unwritten (Quiet), as pkg/rlqs's stream does, so a
// client's last recorded report may be an interval older than its last.
// No request may be denied once both have reported: the bucket is under
// both limits.
func FallUnderLimit(fall, kill, back, dA, dB, jB time.Duration) Scenario {
	return Scenario{
		Name: fmt.Sprintf("under a limit that falls at %v (down %v to %v, answers after %v and %v, b from %v)", fall, kill, back, dA, dB, jB),
		Dur:  fall + 30*time.Second, TTL: 15 * time.Second, Quiet: true,
		Under: 2 * ReportEvery, Changes: []time.Duration{fall},
		Fleet: func(at time.Duration) rlqs.Fleet {
			if at < fall {
				return rlqs.WindowFleet(100, 20*time.Second)
			}
			return rlqs.WindowFleet(30, 20*time.Second)
		},
		Clients: []ClientSpec{
			{Name: "a", Demand: constant(0.5), Delay: dA, Down: [][2]time.Duration{{kill, back}}},
			{Name: "b", Join: jB, Demand: constant(0.5), Delay: dB},
		},
	}
}

// slowScenarios are the Scenarios of rules slower than a token a minute.
func slowScenarios(ttl time.Duration) []Scenario {
	return []Scenario{
		// Rules slower than a token a minute: each share gets a day's
		// fill_interval. Demand far above the limit (clients hammering a
		// rule of 5 an hour), split 2:1, steady enough per report (50 and
		// 25 requests) that the shares stay within the hysteresis: a share
		// replaced at every report loses Envoy's fraction of a token each
		// time (docs/rlqs.md).
		{Name: "5 an hour 2:1", Fleet: fixedFleet(rlqs.WindowFleet(5, time.Hour)), Dur: 3 * time.Hour, TTL: ttl,
			Full: time.Hour, Least: 0.9, MaxInjected: 4, Clients: twoEnvoys(10, 5)},
		// 3 a day between two Envoys is 1.97 and 1.03 a day: whole tokens a
		// day make that 1 and 1, two thirds of the rule.
		{Name: "3 a day 2:1", Fleet: fixedFleet(rlqs.WindowFleet(3, 24*time.Hour)), Dur: 30 * time.Hour, TTL: ttl,
			Full: 6 * time.Hour, Least: 0.6, MaxInjected: 4, Clients: twoEnvoys(10, 5)},
		// The same rules at low demand, still above the limit: a few
		// requests per report, so the demand measured moves by tens of
		// percent from report to report (2 against 3), and at 3 a day the
		// slower Envoy's reports alternate between one request and none.
		// A share replaced at every report never refills a whole token
		// (Envoy floors the fill ratio), so the policy must not replace a
		// slow share for noise; and a share that drops to DENY_ALL at an
		// idle report comes back as a full bucket (E_jump). The slow
		// rules' runs may gain at once only the two new buckets' 2 tokens
		// each (MaxInjected).
		{Name: "5 an hour, low demand", Fleet: fixedFleet(rlqs.WindowFleet(5, time.Hour)), Dur: 3 * time.Hour, TTL: ttl,
			Full: time.Hour, Least: 0.8, MaxInjected: 4, Clients: twoEnvoys(0.5, 0.25)},
		{Name: "3 a day, low demand", Fleet: fixedFleet(rlqs.WindowFleet(3, 24*time.Hour)), Dur: 36 * time.Hour, TTL: ttl,
			Full: 12 * time.Hour, Least: 0.6, MaxInjected: 4, Clients: twoEnvoys(0.2, 0.1)},
	}
}

// fleetScenarios are the Scenarios of the bench's large skewed fleets.
func fleetScenarios(ttl time.Duration) []Scenario {
	return []Scenario{
		// The bench fleet (bench/rlqsload): a rule of 2000 per 20 s, the
		// demand at 3× the limit split over the Envoys by Zipf's law
		// (exponent 1), the Envoys' first requests spread over one report
		// interval. 40 Envoys is the bench's fleet per bucket; 400 the
		// fleet of one replica at 400 Envoys per bucket.
		{Name: "zipf forty at 3x", Fleet: fixedFleet(rlqs.WindowFleet(2000, 20*time.Second)), Dur: 2 * time.Minute, TTL: ttl,
			Full: 2 * ReportEvery, Clients: zipf(40, 300)},
		{Name: "zipf four hundred at 3x", Fleet: fixedFleet(rlqs.WindowFleet(2000, 20*time.Second)), Dur: 2 * time.Minute, TTL: ttl,
			Full: 2 * ReportEvery, Clients: zipf(400, 300)},
	}
}

// zipf is n clients whose demands sum to total requests a second, split
// by Zipf's law with exponent 1 (the first the busiest), their first
// requests spread evenly over one report interval, each answered after
// 1 ms.
func zipf(n int, total float64) []ClientSpec {
	var h float64
	for i := range n {
		h += 1 / float64(i+1)
	}
	cs := make([]ClientSpec, n)
	for i := range cs {
		cs[i] = ClientSpec{Name: fmt.Sprintf("z%d", i), Join: ReportEvery * time.Duration(i) / time.Duration(n),
			Demand: constant(total / h / float64(i+1)), Delay: time.Millisecond}
	}
	return cs
}

// windowBound is, for the window [s, s+T], the fleet's largest rate and
// burst over it (a limit change is bounded by the larger limit until it
// settles).
func windowBound(sc Scenario, s, T time.Duration) (rate, burst uint64) {
	points := []time.Duration{s, s + T}
	for _, ch := range sc.Changes {
		for _, p := range []time.Duration{ch, ch + Settling} {
			if p > s && p <= s+T {
				points = append(points, p)
			}
		}
	}
	for _, p := range points {
		f := maxFleet(sc, p)
		rate, burst = max(rate, rlqs.FleetRate(f)), max(burst, f.Burst)
	}
	return rate, burst
}

// maxFleet is sc's fleet at at, or the one before a change while the change
// settles, whichever has the larger rate.
func maxFleet(sc Scenario, at time.Duration) rlqs.Fleet {
	f := sc.Fleet(at)
	for _, ch := range sc.Changes {
		if at >= ch && at < ch+Settling {
			if g := sc.Fleet(ch - time.Nanosecond); rlqs.FleetRate(g) > rlqs.FleetRate(f) {
				f = g
			}
		}
	}
	return f
}

// CheckBound checks admitted ≤ B + r·T + E on every interval [s, s+T]
// (s at an admission, which is where the count peaks), for each T, in
// big-int arithmetic. E = the largest excess of the max_tokens in force
// over B, plus the tokens injected at once (new buckets, upward
// max_tokens jumps) within the interval.
func CheckBound(t testing.TB, sc Scenario, res Result) {
	t.Helper()
	adm := res.Admitted
	inj := res.Injected
	unit := new(big.Int).SetUint64(rlqs.PerSecond)
	prefix := make([]int64, len(inj)+1) // thousandths of a token
	for i, e := range inj {
		prefix[i+1] = prefix[i] + e[1]
	}
	injectedIn := func(from, to int64) *big.Int {
		lo := sort.Search(len(inj), func(i int) bool { return inj[i][0] >= from })
		hi := sort.Search(len(inj), func(i int) bool { return inj[i][0] > to })
		return big.NewInt(prefix[hi] - prefix[lo])
	}
	for _, T := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, time.Minute, sc.Dur} {
		worst, worstAt := new(big.Rat), time.Duration(0)
		j := 0
		for i := range adm {
			for j < len(adm) && adm[j] <= adm[i]+int64(T) {
				j++
			}
			count := big.NewInt(int64(j - i))
			r, b := windowBound(sc, time.Duration(adm[i]), T)
			// In rlqs.PerSecond's unit (P a token): bound·P =
			// (B + excess)·P + r·T/1s + injected (thousandths)·P/1000.
			bound := new(big.Int).Mul(new(big.Int).SetUint64(r), big.NewInt(int64(T)))
			bound.Quo(bound, big.NewInt(int64(time.Second)))
			bound.Add(bound, new(big.Int).Mul(new(big.Int).SetUint64(b+res.MaxExcess), unit))
			bound.Add(bound, new(big.Int).Mul(injectedIn(adm[i], adm[i]+int64(T)), big.NewInt(int64(rlqs.PerSecond/1000))))
			got := new(big.Int).Mul(count, unit)
			if got.Cmp(bound) > 0 {
				bf, _ := new(big.Rat).SetFrac(bound, unit).Float64()
				t.Fatalf("%d admitted in [%v, %v+%v], above the bound %.3f (r=%.6f per s, B=%d, excess %d)",
					j-i, time.Duration(adm[i]), time.Duration(adm[i]), T, bf, float64(r)/float64(rlqs.PerSecond), b, res.MaxExcess)
			}
			if ratio := new(big.Rat).SetFrac(got, bound); ratio.Cmp(worst) > 0 {
				worst, worstAt = ratio, time.Duration(adm[i])
			}
		}
		f, _ := worst.Float64()
		t.Logf("T=%v: worst admitted/bound %.3f at %v", T, f, worstAt)
	}
	total := prefix[len(inj)]
	t.Logf("tokens gained at once: %.3f in %d jumps; %d token buckets made, %.1f tokens lost to Envoy's rounding down",
		float64(total)/1000, len(inj), res.Replaced, res.Floored)
	if sc.MaxInjected != 0 && total > int64(sc.MaxInjected)*1000 {
		t.Fatalf("Envoy gained %.3f tokens at once over the run, above %d: shares flip between DENY_ALL and a token bucket",
			float64(total)/1000, sc.MaxInjected)
	}
	if res.MaxExcess > 2*uint64(res.Floors) {
		t.Fatalf("max_tokens in force exceeded B by %d, more than the two-token floors of %d clients", res.MaxExcess, res.Floors)
	}
}

// Settling is how long after a limit change the old limit may still show:
// every client reports within ReportEvery, and its answer arrives within the
// Grace (1 s).
const Settling = ReportEvery + time.Second

// CheckFull checks that every 20 s window from sc.Full on admits at least
// 90% of the fleet's rate, skipping windows a limit change unsettles.
func CheckFull(t testing.TB, sc Scenario, res Result) {
	t.Helper()
	if sc.Full == 0 {
		return
	}
	if sc.Least != 0 {
		lo := sort.Search(len(res.Admitted), func(i int) bool { return res.Admitted[i] >= int64(sc.Full) })
		want := float64(rlqs.FleetRate(sc.Fleet(sc.Full))) / float64(rlqs.PerSecond) * (sc.Dur - sc.Full).Seconds()
		r := float64(len(res.Admitted)-lo) / want
		t.Logf("admitted from %v to %v: %d, %.3f of the limit's %.1f", sc.Full, sc.Dur, len(res.Admitted)-lo, r, want)
		if r < sc.Least {
			t.Fatalf("admitted %.3f of the limit from %v, want ≥ %.2f", r, sc.Full, sc.Least)
		}
		return
	}
	w := 20 * time.Second
	if sc.Window != 0 {
		w = sc.Window
	}
	worst, worstAt := 2.0, time.Duration(0)
next:
	for s := sc.Full; s+w <= sc.Dur; s += 100 * time.Millisecond {
		for _, ch := range sc.Changes {
			if s < ch+Settling && s+w > ch {
				continue next
			}
		}
		lo := sort.Search(len(res.Admitted), func(i int) bool { return res.Admitted[i] >= int64(s) })
		hi := sort.Search(len(res.Admitted), func(i int) bool { return res.Admitted[i] >= int64(s+w) })
		want := float64(rlqs.FleetRate(sc.Fleet(s))) / float64(rlqs.PerSecond) * w.Seconds()
		if r := float64(hi-lo) / want; r < worst {
			worst, worstAt = r, s
		}
	}
	floor := 0.9
	if sc.Floor != 0 {
		floor = sc.Floor
	}
	t.Logf("least admitted in a %v window from %v: %.3f of the limit, at %v", w, sc.Full, worst, worstAt)
	if worst < floor {
		t.Fatalf("a %v window from %v admitted %.3f of the limit, want ≥ %.2f", w, worstAt, worst, floor)
	}
}

// CheckUnder checks that no request is denied from sc.Under on.
func CheckUnder(t testing.TB, sc Scenario, res Result) {
	t.Helper()
	if sc.Under == 0 {
		return
	}
	i := sort.Search(len(res.Denied), func(i int) bool { return res.Denied[i] >= int64(sc.Under) })
	late := res.Denied[i:]
	if sc.Denials != 0 {
		f := float64(len(late)) / float64(res.Requests)
		t.Logf("%d of %d requests denied from %v on (%.3f)", len(late), res.Requests, sc.Under, f)
		if f > sc.Denials {
			t.Fatalf("%s: %.3f of the requests denied from %v on, under the limit, want at most %.3f", sc.Name, f, sc.Under, sc.Denials)
		}
		return
	}
	if len(late) > 0 {
		t.Fatalf("%s: %d of %d requests denied from %v on, under the limit (first at %v)", sc.Name, len(late), res.Requests, sc.Under, time.Duration(late[0]))
	}
}

// twoEnvoys is two clients 20 ms from the server: a from the start at
// demand a, and b joining 700 ms later at demand b (requests/s).
func twoEnvoys(a, b float64) []ClientSpec {
	return []ClientSpec{
		{Name: "a", Demand: constant(a), Delay: 20 * time.Millisecond},
		{Name: "b", Join: 700 * time.Millisecond, Demand: constant(b), Delay: 20 * time.Millisecond},
	}
}
