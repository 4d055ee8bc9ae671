package rlqs_test

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs/redisledger"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// isTokenBucket checks that a is a token bucket Envoy 1.40 applies as
// meant: whole-second fill_interval, TTL ttl; it returns its rate in
// the unit of rlqs.PerSecond.
func isTokenBucket(t *testing.T, name string, a *rlqsv3.RateLimitQuotaResponse_BucketAction, ttl time.Duration) uint64 {
	t.Helper()
	q := a.GetQuotaAssignmentAction()
	tb := q.GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		t.Fatalf("%s: %s, want a token bucket", name, describe(a))
	}
	if fi := tb.GetFillInterval(); fi.GetNanos() != 0 || fi.GetSeconds() < 1 || tb.GetMaxTokens() < 1 || tb.GetTokensPerFill().GetValue() < 1 {
		t.Fatalf("%s: %s: not a token bucket Envoy 1.40 applies as meant", name, describe(a))
	}
	if got := q.GetAssignmentTimeToLive().AsDuration(); got != ttl {
		t.Fatalf("%s: %s, want TTL %v", name, describe(a), ttl)
	}
	return rlqs.StrategyRate(q.GetRateLimitStrategy())
}

// TestAssignments: what each kind of rule gives a bucket, and that the
// reported admissions are charged to the counter ShouldRateLimit keeps.
func TestAssignments(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	c := f.open(t)
	got := c.report(use("user=alice", 0, 1, 0), use("user=trusted", 0, 7, 0), use("user=vip", 0, 7, 0),
		use("other=x", 0, 7, 0), use("tier=shadow", 0, 30, 0), use("two=x", 0, 1, 0))
	for bucket, want := range map[string]string{
		"user=trusted": "allow@15s", // whitelisted
		"user=vip":     "allow@15s", // unlimited
		"other=x":      "allow@15s", // no rule
		"tier=shadow":  "allow@15s", // over its 10, but shadow_mode never denies
	} {
		if d := describe(got[bucket]); d != want {
			t.Errorf("%s: %s, want %s", bucket, d, want)
		}
	}
	alice := isTokenBucket(t, "user=alice", got["user=alice"], 15*time.Second)
	if most := 100 * rlqs.PerSecond / 60; alice == 0 || alice > most {
		t.Errorf("user=alice: rate %d, want 1 to %d (100 a minute)", alice, most)
	}
	// The most restrictive of 600 a minute and 600 an hour.
	if two := isTokenBucket(t, "two=x", got["two=x"], 15*time.Second); two > 600*rlqs.PerSecond/3600 {
		t.Errorf("two=x: rate %d, want at most 600 an hour's %d", two, 600*rlqs.PerSecond/3600)
	}
	for _, tt := range []struct {
		kv   []string
		want uint64
	}{{[]string{"user", "alice"}, 1}, {[]string{"tier", "shadow"}, 30}, {[]string{"two", "x"}, 1}} {
		if got := f.used(t, 0, tt.kv...); got != tt.want {
			t.Errorf("counter of %v = %d, want %d charged", tt.kv, got, tt.want)
		}
	}
	if got := f.used(t, 1, "two", "x"); got != 1 {
		t.Errorf("hourly counter of two=x = %d, want 1", got)
	}
}

// TestSpentWindowDeniesUntilReset: once the reported admissions spend a
// window, the bucket is denied until the window ends, and at its end the
// server pushes the token bucket without waiting for a report.
func TestSpentWindowDeniesUntilReset(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	c := f.open(t)
	f.set(t0.Add(10 * time.Second))
	isTokenBucket(t, "first", c.report(use("user=a", 0, 40, 0))["user=a"], 15*time.Second)
	// 50 s to the window's end: denied for the TTL; the next report denies again.
	if d := describe(c.report(use("user=a", 5*time.Second, 60, 3))["user=a"]); d != "deny@15s" {
		t.Fatalf("spent: %s, want deny@15s", d)
	}
	if got := f.used(t, 0, "user", "a"); got != 100 {
		t.Fatalf("counter = %d, want 100", got)
	}
	// 100 ms before the end: denied for the least TTL, 1 s, and pushed
	// a token bucket at the end.
	f.set(t0.Add(59*time.Second + 900*time.Millisecond))
	if d := describe(c.report(use("user=a", 5*time.Second, 0, 20))["user=a"]); d != "deny@1s" {
		t.Fatalf("just before the reset: %s, want deny@1s", d)
	}
	f.advance(time.Second)
	pushed := byBucket(c.recv())
	isTokenBucket(t, "pushed", pushed["user=a"], 14*time.Second) // what is left of 15 s, in whole seconds
	c.quiet()
}

// TestPushWaitsForTheInjectedClock: a stream's pushes run on
// Options.TimerAt, not on the real clock. With a TTL of an hour, a window
// spent 50 s before its reset is pushed at the reset: not a moment before
// on the injected clock, and at once when it gets there, though no real
// time has passed. The timer of a stream that ends is stopped.
func TestPushWaitsForTheInjectedClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), func(o *rlqs.Options) { o.TTL = time.Hour })
	c := f.open(t)
	f.set(t0.Add(10 * time.Second))
	if d := describe(c.report(use("user=a", 0, 100, 0))["user=a"]); d != "deny@50s" {
		t.Fatalf("spent: %s, want deny@50s (until the reset)", d)
	}
	waitFor(t, func() bool { return f.clock.Pending() == 1 }, "the stream's timer")
	f.advance(49*time.Second + 999*time.Millisecond)
	c.quiet()
	f.advance(time.Millisecond)
	// The assignment held since the report, for what is left of its hour.
	isTokenBucket(t, "pushed at the reset", byBucket(c.recv())["user=a"], time.Hour-50*time.Second)

	c2 := f.open(t)
	if d := describe(c2.report(use("user=b", 0, 100, 0))["user=b"]); d != "deny@1m0s" {
		t.Fatalf("spent: %s, want deny@1m0s (until the reset)", d)
	}
	// c's stream has no timer left after its push: the one is c2's.
	waitFor(t, func() bool { return f.clock.Pending() == 1 }, "the second stream's timer")
	c2.cancel()
	waitFor(t, func() bool { return f.clock.Pending() == 0 }, "the ended stream's timer stopped")
}

// TestReconnectKeepsTheCount: a new stream (Envoy reconnecting, to this
// replica or another) finds the window's count in the store.
func TestReconnectKeepsTheCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	c := f.open(t)
	f.set(t0.Add(10 * time.Second))
	isTokenBucket(t, "first stream", c.report(use("user=r", 5*time.Second, 70, 0))["user=r"], 15*time.Second)
	c.cancel()
	if code := c.end(); code != codes.Canceled {
		t.Fatalf("cancelled stream ended with %v", code)
	}
	c2 := f.open(t)
	if d := describe(c2.report(use("user=r", 5*time.Second, 30, 0))["user=r"]); d != "deny@15s" {
		t.Fatalf("after reconnecting: %s, want deny@15s (70 + 30 spend the 100)", d)
	}
}

// TestBadUsages: malformed usages are refused one by one, counted, and
// charge nothing; the stream and its good usages go on. A report that
// cannot be served at all ends the stream with InvalidArgument.
func TestBadUsages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), func(o *rlqs.Options) { o.Limits.MaxEntries = 2 })
	c := f.open(t)
	negative := use("user=neg", 0, 5, 0)
	negative.TimeElapsed = &durationpb.Duration{Seconds: -1}
	malformed := use("user=mal", 0, 5, 0)
	malformed.TimeElapsed = &durationpb.Duration{Seconds: 1, Nanos: -5}
	got := c.report(
		use("", 5*time.Second, 5, 0),
		negative, malformed,
		use("user=long", 2*time.Hour, 5, 0),
		use("user=absurd", 5*time.Second, 1<<40, 0),
		use("user=overflow", 5*time.Second, 1<<63, 1<<63),
		use("a=1,b=2,c=3", 5*time.Second, 5, 0),
		use("user=ok", 5*time.Second, 5, 0),
		use("user=ok", 5*time.Second, 5, 0),
	)
	if len(got) != 1 || got["user=ok"] == nil {
		t.Fatalf("answered %v, want user=ok alone", got)
	}
	for _, tt := range []struct {
		why  rlqs.Refusal
		want int
	}{{rlqs.RefusedEmptyBucket, 1}, {rlqs.RefusedBadElapsed, 3}, {rlqs.RefusedAbsurdCounts, 2}, {rlqs.RefusedBadBucket, 1}, {rlqs.RefusedDuplicate, 1}} {
		if n := f.obs.refusals(tt.why); n != tt.want {
			t.Errorf("refused %s: %d, want %d", tt.why, n, tt.want)
		}
	}
	for _, u := range []string{"neg", "mal", "long", "absurd", "overflow"} {
		if n := f.used(t, 0, "user", u); n != 0 {
			t.Errorf("user=%s charged %d, want nothing", u, n)
		}
	}
	if n := f.used(t, 0, "user", "ok"); n != 5 {
		t.Errorf("user=ok charged %d, want 5 (once)", n)
	}
	c.send("other")
	if code := c.end(); code != codes.InvalidArgument {
		t.Errorf("domain changed: %v, want InvalidArgument", code)
	}
	c2 := f.open(t)
	c2.send("", use("user=x", 0, 1, 0))
	if code := c2.end(); code != codes.InvalidArgument {
		t.Errorf("no domain: %v, want InvalidArgument", code)
	}
	if n := f.obs.refusals(rlqs.RefusedNoDomain); n != 1 {
		t.Errorf("refused no_domain: %d, want 1", n)
	}
}

// TestCaps: streams beyond MaxStreams end with ResourceExhausted; buckets
// beyond MaxBuckets on a stream are refused, the others served.
func TestCaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), func(o *rlqs.Options) { o.MaxStreams, o.MaxBuckets = 1, 2 })
	c := f.open(t)
	got := c.report(use("user=1", 0, 1, 0), use("user=2", 0, 1, 0), use("user=3", 0, 1, 0))
	if len(got) != 2 || got["user=3"] != nil {
		t.Fatalf("answered %v, want user=1 and user=2", got)
	}
	if n := f.obs.refusals(rlqs.RefusedMaxBuckets); n != 1 {
		t.Errorf("refused max_buckets: %d, want 1", n)
	}
	if _, buckets := f.obs.gauges(); buckets != 2 {
		t.Errorf("buckets gauge %d, want 2", buckets)
	}
	c2 := f.open(t)
	c2.send("edge", use("user=1", 0, 1, 0))
	if code := c2.end(); code != codes.ResourceExhausted {
		t.Errorf("second stream: %v, want ResourceExhausted", code)
	}
	// The first stream still reports its buckets (10 s on, so the report
	// is answered, not kept: see TestUnchangedReportIsKept).
	f.advance(10 * time.Second)
	if got := c.report(use("user=1", 10*time.Second, 1, 0)); got["user=1"] == nil {
		t.Errorf("first stream after the refusal: %v", got)
	}
	c.cancel()
	c.end()
	waitFor(t, func() bool { s, b := f.obs.gauges(); return s == 0 && b == 0 }, "gauges back to 0")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDrain: draining ends the streams with Unavailable, so a graceful
// stop of the gRPC server returns at once instead of waiting for them.
func TestDrain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	c := f.open(t)
	c.report(use("user=d", 0, 1, 0))
	stopped := make(chan struct{})
	go func() { f.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("graceful stop waits for the stream")
	}
	if code := c.end(); code != codes.Unavailable {
		t.Errorf("drained stream: %v, want Unavailable", code)
	}
}

// TestReload: a reload that changes a rule's limit changes the assignment
// at the next report; one that removes the rule abandons the bucket, which
// Envoy then subscribes again and finds allowed.
func TestReload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	c := f.open(t)
	before := isTokenBucket(t, "before", c.report(use("user=a", 0, 1, 0))["user=a"], 15*time.Second)
	f.setRules(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n")
	after := isTokenBucket(t, "raised", c.report(use("user=a", 5*time.Second, 5, 0))["user=a"], 15*time.Second)
	if after <= before {
		t.Errorf("limit raised 60-fold: rate %d, was %d", after, before)
	}
	f.setRules(t, "domain: edge\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 100}\n")
	if d := describe(c.report(use("user=a", 5*time.Second, 5, 0))["user=a"]); d != "abandon" {
		t.Errorf("rule removed: %s, want abandon", d)
	}
	if d := describe(c.report(use("user=a", 0, 1, 0))["user=a"]); d != "allow@15s" {
		t.Errorf("subscribed again: %s, want allow@15s", d)
	}
}

// TestFailureModesRedisDown: with Redis stopped, each rule's failure_mode
// decides: allow → ALLOW_ALL, deny → DENY_ALL, error → nothing, so Envoy
// keeps its last assignment.
func TestFailureModesRedisDown(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	f := newFixture(t, redisstore.New(r.BoundedClient(t), redisstore.Options{}))
	c := f.open(t)
	all := []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use("open=a", 0, 1, 0), use("closed=a", 0, 1, 0), use("strict=a", 0, 1, 0)}
	got := c.report(all...)
	for _, b := range []string{"open=a", "closed=a", "strict=a"} {
		isTokenBucket(t, b+" with Redis up", got[b], 15*time.Second)
	}
	r.Stop()
	got = c.report(all...)
	if d := describe(got["open=a"]); d != "allow@15s" {
		t.Errorf("allow: %s, want allow@15s", d)
	}
	if d := describe(got["closed=a"]); d != "deny@15s" {
		t.Errorf("deny: %s, want deny@15s", d)
	}
	if a := got["strict=a"]; a != nil {
		t.Errorf("error: %s, want nothing sent", describe(a))
	}
}

// TestTwoReplicasShareTheCount: Envoys on two replicas that share one
// Redis charge one counter: what one replica's client admitted, the
// other's sees spent.
func TestTwoReplicasShareTheCount(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	a := newFixture(t, redisstore.New(r.Client(t), redisstore.Options{}))
	b := newFixture(t, redisstore.New(r.Client(t), redisstore.Options{}))
	a.set(t0.Add(10 * time.Second))
	b.set(t0.Add(10 * time.Second))
	isTokenBucket(t, "replica a", a.open(t).report(use("user=r", 5*time.Second, 70, 0))["user=r"], 15*time.Second)
	if d := describe(b.open(t).report(use("user=r", 5*time.Second, 30, 0))["user=r"]); d != "deny@15s" {
		t.Fatalf("replica b: %s, want deny@15s (70 + 30 spend the 100)", d)
	}
	if got := b.used(t, 0, "user", "r"); got != 100 {
		t.Errorf("counter = %d, want 100", got)
	}
}

// TestGlobalShadowMode: with Options.ShadowMode every bucket is allowed,
// and its admissions still charged.
func TestGlobalShadowMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), func(o *rlqs.Options) { o.ShadowMode = true })
	if d := describe(f.open(t).report(use("user=s", 5*time.Second, 150, 0))["user=s"]); d != "allow@15s" {
		t.Errorf("shadow mode, over the limit: %s, want allow@15s", d)
	}
	if got := f.used(t, 0, "user", "s"); got != 150 {
		t.Errorf("counter = %d, want 150 charged", got)
	}
}

// partialStore answers every counter but fails the ones in fail, as a
// Redis Cluster whose node of those slots is down.
type partialStore struct {
	window.Store
	fail []int
}

func (p partialStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	allowed, _ := p.Store.Take(ctx, now, reqs, res)
	return allowed, &window.PartialError{Failed: p.fail, Err: window.ErrStore}
}

// partialRules has a bucket key per failure mode, each with two limits,
// so that a store failing for one counter leaves the other deciding.
const partialRules = `
domain: edge
descriptors:
  - key: deny
    failure_mode: deny
    rate_limits:
      - {unit: minute, requests_per_unit: 600}
      - {unit: hour, requests_per_unit: 6000}
  - key: allow
    failure_mode: allow
    rate_limits:
      - {unit: minute, requests_per_unit: 600}
      - {unit: hour, requests_per_unit: 6000}
  - key: error
    failure_mode: error
    rate_limits:
      - {unit: minute, requests_per_unit: 600}
      - {unit: hour, requests_per_unit: 6000}
`

// TestPartialFailure: when the store fails for some counters only, their
// limits' failure modes apply and the others decide as usual; the most
// restrictive wins.
func TestPartialFailure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		bucket string
		want   string // "tb" for a token bucket
	}{{"deny=x", "deny@15s"}, {"allow=x", "tb"}, {"error=x", "none"}} {
		t.Run(tt.bucket, func(t *testing.T) {
			t.Parallel()
			// Each report has one usage: its counters are 0 and 1; 1 fails.
			f := newFixture(t, partialStore{window.NewMemory(), []int{1}})
			f.setRules(t, partialRules)
			c := f.open(t)
			c.send("edge", use(tt.bucket, 0, 1, 0))
			if tt.want == "none" {
				c.quiet() // nothing to send: no message at all
				return
			}
			a := byBucket(c.recv())[tt.bucket]
			if tt.want == "tb" {
				isTokenBucket(t, tt.bucket, a, 15*time.Second)
				return
			}
			if d := describe(a); d != tt.want {
				t.Errorf("%s: %s, want %s", tt.bucket, d, tt.want)
			}
		})
	}
}

// TestRecheckPushesTheFreedShare: a client that joins a bucket another
// client holds whole gets nothing until the first one's decrease has
// reached its Envoy (the ledger's Grace after the decrease); the server
// then pushes the second client its share on the stream (Share.Recheck),
// without waiting for the second client's next report.
func TestRecheckPushesTheFreedShare(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	f.setRules(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}\n")
	a, b := f.open(t), f.open(t)
	// a's demand is measured (20/s), so it holds the whole 10/s.
	whole := isTokenBucket(t, "a alone", a.report(use("user=x", 5*time.Second, 0, 100))["user=x"], 15*time.Second)
	if whole != 10*rlqs.PerSecond {
		t.Fatalf("a alone holds rate %d, want the whole %d", whole, 10*rlqs.PerSecond)
	}
	f.advance(100 * time.Millisecond)
	if d := describe(b.report(use("user=x", 0, 1, 0))["user=x"]); d != "deny@15s" {
		t.Fatalf("b joins a bucket a holds whole: %s, want deny@15s", d)
	}
	// a's report lowers its share; its old one counts for the Grace (1 s).
	f.set(t0.Add(5 * time.Second))
	lowered := isTokenBucket(t, "a lowered", a.report(use("user=x", 5*time.Second, 15, 85))["user=x"], 15*time.Second)
	if lowered >= whole {
		t.Fatalf("a at twice b's demand keeps rate %d, want less than %d", lowered, whole)
	}
	f.advance(100 * time.Millisecond)
	if d := describe(b.report(use("user=x", 5*time.Second, 0, 25))["user=x"]); d != "deny@15s" {
		t.Fatalf("b before a's decrease is counted as arrived: %s, want deny@15s", d)
	}
	b.quiet() // nothing before the Grace ends
	f.set(t0.Add(6 * time.Second))
	pushed := byBucket(b.recv())["user=x"]
	got := isTokenBucket(t, "b pushed", pushed, 15*time.Second)
	if got == 0 || got+lowered > 10*rlqs.PerSecond {
		t.Fatalf("b pushed rate %d beside a's %d, want more than 0 and at most %d together", got, lowered, 10*rlqs.PerSecond)
	}
	b.quiet() // one push: the next is b's report's answer
	a.quiet()
}

// TestRecheckLeavesFailureModes: a re-check asks only the ledger, so it
// never replaces what a limit's failure mode decided at the last report
// (here DENY_ALL, the store failing for the bucket's second limit).
func TestRecheckLeavesFailureModes(t *testing.T) {
	t.Parallel()
	// Each report has one usage: its counters are 0 and 1; 1 fails.
	f := newFixture(t, partialStore{window.NewMemory(), []int{1}})
	f.setRules(t, partialRules)
	a, b := f.open(t), f.open(t)
	// a's demand is measured (20/s): its share is the whole of both
	// limits; b subscribes and gets none.
	for _, u := range []struct {
		c *client
		u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	}{{a, use("deny=x", 5*time.Second, 0, 100)}, {b, use("deny=x", 0, 1, 0)}} {
		if d := describe(u.c.report(u.u)["deny=x"]); d != "deny@15s" {
			t.Fatalf("subscription: %s, want deny@15s (failure mode)", d)
		}
		f.advance(100 * time.Millisecond)
	}
	// a's decrease leaves b room at 6 s, which the ledger tells b's stream.
	f.set(t0.Add(5 * time.Second))
	a.report(use("deny=x", 5*time.Second, 15, 85))
	f.advance(100 * time.Millisecond)
	b.report(use("deny=x", 5*time.Second, 0, 25))
	// The move fires the re-check: after a failure mode denied the
	// bucket, nothing until the next report.
	f.set(t0.Add(6 * time.Second))
	b.quiet()
}

// TestRecheckKeepsASpentWindowDenied: a re-check that finds room never
// replaces the DENY_ALL of a spent window. Envoy would start the token
// bucket full and admit again before the window's reset (found with a real
// Envoy after a limit was lowered: the share was 0, so no reset push was
// due, and the re-check pushed a token bucket).
func TestRecheckKeepsASpentWindowDenied(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	a, b := f.open(t), f.open(t)
	f.set(t0.Add(10 * time.Second))
	// a's demand (100/s, all denied: nothing charged) takes the whole
	// 100 a minute; b subscribes and gets nothing.
	isTokenBucket(t, "a busy", a.report(use("user=s", 5*time.Second, 0, 500))["user=s"], 15*time.Second)
	f.advance(100 * time.Millisecond)
	if d := describe(b.report(use("user=s", 0, 0, 1))["user=s"]); d != "deny@15s" {
		t.Fatalf("b beside a holder of everything: %s, want deny@15s", d)
	}
	// a's demand falls to b's: a decrease, whose old share counts for
	// the Grace, until 12 s.
	f.set(t0.Add(11 * time.Second))
	isTokenBucket(t, "a lowered", a.report(use("user=s", 5*time.Second, 0, 5))["user=s"], 15*time.Second)
	// b's report spends the window (100 admitted); its share is 0 until
	// a's old share stops counting at 12 s, when a re-check is due.
	f.advance(100 * time.Millisecond)
	if d := describe(b.report(use("user=s", time.Second, 100, 0))["user=s"]); d != "deny@15s" {
		t.Fatalf("b spends the window: %s, want deny@15s", d)
	}
	// The move fires the re-check: nothing while the window is spent
	// (it resets at 60 s).
	f.set(t0.Add(12 * time.Second))
	b.quiet()
}

// TestReconnectKeepsTheHeldAssignment: an Envoy whose stream broke
// reconnects (here or to another replica) as a new client, and its first
// report is a periodic one. The ledger still counts its old client's share
// until that lapses, so the new client is capped below its target; the
// server then sends nothing, and Envoy keeps the assignment it holds
// (which the old client's share counts), instead of one that would admit
// nothing. At the old share's lapse the server pushes the new share.
func TestReconnectKeepsTheHeldAssignment(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory())
	f.setRules(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}\n")
	a := f.open(t)
	// a's demand is 20/s: it holds the whole 10/s, counted until 16 s.
	isTokenBucket(t, "a", a.report(use("user=x", 5*time.Second, 0, 100))["user=x"], 15*time.Second)
	a.cancel()
	a.end()
	a2 := f.open(t)
	for _, at := range []time.Duration{5 * time.Second, 15500 * time.Millisecond} {
		f.set(t0.Add(at))
		a2.send("edge", use("user=x", 5*time.Second, 10, 40))
		a2.quiet()
	}
	f.set(t0.Add(16 * time.Second)) // a's share lapses; the re-check is due
	got := isTokenBucket(t, "pushed at the old share's lapse", byBucket(a2.recv())["user=x"], 15*time.Second)
	if got != 10*rlqs.PerSecond {
		t.Fatalf("a2 alone pushed rate %d, want the whole %d", got, 10*rlqs.PerSecond)
	}
	// A new bucket on the same stream (a subscription) capped to 0 is
	// still denied: Envoy holds nothing for it.
	b := f.open(t)
	if d := describe(b.report(use("user=x", 0, 1, 0))["user=x"]); d != "deny@15s" {
		t.Fatalf("a subscription beside a holder of everything: %s, want deny@15s", d)
	}
}

// TestReportIsOneLedgerRoundTrip: a report's ledger writes, one per
// limited bucket and limit, share one Redis round trip once the ledger
// has the buckets (the subscription reads them and loads the script), and
// each bucket still gets its own share.
func TestReportIsOneLedgerRoundTrip(t *testing.T) {
	t.Parallel()
	l := redisledger.New(redistest.Start(t).BoundedClient(t), redisledger.Options{})
	f := newFixture(t, window.NewMemory(), func(o *rlqs.Options) { o.Ledger = l })
	c := f.open(t)
	report := func(elapsed time.Duration) map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction {
		// Four token buckets (two=x has two limits: five ledger
		// requests), and three the ledger is not asked about.
		return c.report(use("user=a", elapsed, 1, 0), use("user=b", elapsed, 2, 0), use("user=c", elapsed, 3, 0),
			use("two=x", elapsed, 1, 0), use("user=vip", elapsed, 7, 0), use("tier=shadow", elapsed, 3, 0), use("other=x", elapsed, 1, 0))
	}
	report(0)
	if got := l.RoundTrips(); got != 3 {
		t.Fatalf("subscription: %d round trips, want 3 (read, write: NOSCRIPT, EVAL)", got)
	}
	// 10 s on, the assignments sent at the subscription hold 5 s more,
	// less than the next report needs: every share is written and sent
	// (TestUnchangedReportIsKept has the report 5 s on).
	f.advance(10 * time.Second)
	got := report(10 * time.Second)
	if trips := l.RoundTrips() - 3; trips != 1 {
		t.Fatalf("report: %d round trips, want 1", trips)
	}
	for _, b := range []string{"user=a", "user=b", "user=c", "two=x"} {
		isTokenBucket(t, b, got[b], 15*time.Second)
	}
}

// TestUnchangedReportIsKept: a periodic report whose share does not change,
// of a bucket Envoy holds a token bucket for that still holds past its
// next report, is neither written nor answered (Request.Quiet): Envoy
// keeps the assignment, which the ledger counts as long. The next report,
// when the assignment would lapse before the one after, is written and
// answered with the same bucket and a new TTL; a report whose demand moves
// the share is answered at once. On both ledgers; on Redis the kept report
// makes no round trip.
func TestUnchangedReportIsKept(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ledger func(t *testing.T) (rlqs.Ledger, func() uint64)
	}{
		{"memory", func(*testing.T) (rlqs.Ledger, func() uint64) { return rlqs.NewMemory(rlqs.Policy{}), nil }},
		{"redis", func(t *testing.T) (rlqs.Ledger, func() uint64) {
			l := redisledger.New(redistest.Start(t).BoundedClient(t), redisledger.Options{})
			return l, l.RoundTrips
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, trips := tc.ledger(t)
			f := newFixture(t, window.NewMemory(), func(o *rlqs.Options) { o.Ledger = l })
			f.setRules(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 6000}\n")
			c := f.open(t)
			isTokenBucket(t, "subscription", c.report(use("user=x", 0, 1, 0))["user=x"], 15*time.Second)
			// The first measured demand (2/s) sets the share.
			f.advance(5 * time.Second)
			measured := isTokenBucket(t, "first measure", c.report(use("user=x", 5*time.Second, 10, 0))["user=x"], 15*time.Second)

			// 5 s on, the same demand: the assignment holds 10 s more.
			f.advance(5 * time.Second)
			before := uint64(0)
			if trips != nil {
				before = trips()
			}
			c.send("edge", use("user=x", 5*time.Second, 10, 0))
			c.quiet()
			if trips != nil && trips() != before {
				t.Errorf("a kept report made %d round trips, want 0", trips()-before)
			}

			// 10 s after the last answer it holds 5 s, less than the next
			// report needs: written and answered, the same bucket.
			f.advance(5 * time.Second)
			if got := isTokenBucket(t, "refresh", c.report(use("user=x", 5*time.Second, 10, 0))["user=x"], 15*time.Second); got != measured {
				t.Errorf("refreshed rate %d, want the kept %d", got, measured)
			}

			// Demand ten times higher moves the share: answered at once.
			f.advance(5 * time.Second)
			if got := isTokenBucket(t, "raised", c.report(use("user=x", 5*time.Second, 100, 0))["user=x"], 15*time.Second); got <= measured {
				t.Errorf("rate %d at ten times the demand, want more than %d", got, measured)
			}
		})
	}
}
