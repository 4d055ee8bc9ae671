package envoyrls

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

const algorithmRules = `
domain: alg
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 3}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 3, name: slow}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_log}
  - key: wide
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 10}
  - key: logged
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
`

// algStep is one call of an algorithm scenario: after advancing the clock,
// one descriptor with hits (0: Envoy's default of one) and what the
// answer must say.
type algStep struct {
	advance    time.Duration
	hits       uint64
	code       rlsv3.RateLimitResponse_Code
	remaining  uint32
	reset      time.Duration // duration_until_reset
	retryAfter string        // the retry-after header when over; "" when OK
}

// TestAlgorithmAnswers: a token bucket admits its burst at once, then one
// hit per interval; a sliding log admits exactly its limit in any window,
// to the millisecond. limit_remaining is the whole tokens (or entries)
// left, duration_until_reset the time until the bucket is full (the log
// empty), retry-after the whole seconds, at least 1, until the request
// would fit.
func TestAlgorithmAnswers(t *testing.T) {
	t.Parallel()
	over := overCode
	tests := []struct {
		name  string
		key   string
		steps []algStep
	}{
		{"bucket: burst, then one per interval", "bucket", []algStep{
			{0, 0, okCode, 2, 500 * time.Millisecond, ""},
			{0, 0, okCode, 1, time.Second, ""},
			{0, 0, okCode, 0, 1500 * time.Millisecond, ""},
			{0, 0, over, 0, 1500 * time.Millisecond, "1"}, // fits in 500 ms
			{499 * time.Millisecond, 0, over, 0, 1001 * time.Millisecond, "1"},
			{time.Millisecond, 0, okCode, 0, 1500 * time.Millisecond, ""}, // one token back
			{500 * time.Millisecond, 0, okCode, 0, 1500 * time.Millisecond, ""},
			// More than the burst never fits; a stated cost is charged
			// (over_limit: charge), and retry-after says when the bucket
			// was to be full.
			{0, 4, over, 0, 3500 * time.Millisecond, "2"},
			{3500 * time.Millisecond, 0, okCode, 2, 500 * time.Millisecond, ""},
			{0, 2, okCode, 0, 1500 * time.Millisecond, ""},
		}},
		{"bucket: retry-after is the time to the next token", "slow", []algStep{
			{0, 3, okCode, 0, 90 * time.Second, ""},
			{0, 0, over, 0, 90 * time.Second, "30"},
			{10*time.Second + 1, 0, over, 0, 80 * time.Second, "20"},
			{20 * time.Second, 0, okCode, 0, 90 * time.Second, ""},
		}},
		{"log: exact at the window's edge", "log", []algStep{
			{0, 0, okCode, 2, time.Second, ""},
			{100 * time.Millisecond, 0, okCode, 1, time.Second, ""},
			{100 * time.Millisecond, 0, okCode, 0, time.Second, ""},
			{799 * time.Millisecond, 0, over, 0, 201 * time.Millisecond, "1"}, // the first hit leaves in 1 ms
			{time.Millisecond, 0, okCode, 0, time.Second, ""},                 // it has left
			{0, 0, over, 0, time.Second, "1"},
			{999 * time.Millisecond, 0, okCode, 1, time.Second, ""}, // hits at 100, 200 left; 1000 and 1999 in
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, window.NewMemory(), algorithmRules)
			for i, s := range tt.steps {
				f.advance(s.advance)
				d := desc(tt.key, "k")
				if s.hits > 0 {
					d.HitsAddend = wrapperspb.UInt64(s.hits)
				}
				resp := f.call(t, "alg", d)
				st := resp.Statuses[0]
				if resp.OverallCode != s.code || st.LimitRemaining != s.remaining || st.DurationUntilReset.AsDuration() != s.reset {
					t.Errorf("step %d: %v remaining %d reset %v, want %v %d %v", i, resp.OverallCode, st.LimitRemaining, st.DurationUntilReset.AsDuration(), s.code, s.remaining, s.reset)
				}
				if got := header(resp, "retry-after"); got != s.retryAfter {
					t.Errorf("step %d: retry-after %q, want %q", i, got, s.retryAfter)
				}
				if s.retryAfter != "" {
					var body tooManyRequests
					if err := json.Unmarshal(resp.RawBody, &body); err != nil || body.RetryAfterSeconds == 0 {
						t.Errorf("step %d: body %s: %v", i, resp.RawBody, err)
					}
				}
			}
		})
	}
}

func header(resp *rlsv3.RateLimitResponse, key string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// TestAlgorithmFailClosed: with the store down and failure_mode deny, a
// token bucket reads as just emptied (retry-after one token's interval,
// full again after its tolerance), a sliding log as full until the
// current window of its length ends, as a fixed window.
func TestAlgorithmFailClosed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, failingStore{}, `
domain: alg
failure_mode: deny
descriptors:
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 3}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
`)
	for _, tt := range []struct {
		key        string
		reset      time.Duration
		retryAfter string
	}{
		{"slow", 90 * time.Second, "30"},
		{"log", 45 * time.Second, "45"}, // t0 is 15 s into a minute
	} {
		resp := f.call(t, "alg", desc(tt.key, "k"))
		st := resp.Statuses[0]
		if resp.OverallCode != overCode || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != tt.reset || header(resp, "retry-after") != tt.retryAfter {
			t.Errorf("%s: %v remaining %d reset %v retry-after %q, want OVER_LIMIT 0 %v %q", tt.key, resp.OverallCode,
				st.LimitRemaining, st.DurationUntilReset.AsDuration(), header(resp, "retry-after"), tt.reset, tt.retryAfter)
		}
	}
}

// TestAlgorithmOverride: an override of a token bucket stays a token
// bucket, of burst its requests_per_unit (or what fills within
// window.MaxBucketSpan); one of a sliding log stays a
// log, and may not pass rules.MaxSlidingLogLimit.
func TestAlgorithmOverride(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), algorithmRules)
	override := func(key string, n uint32) *rlv3.RateLimitDescriptor {
		d := desc(key, "k")
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_SECOND}
		return d
	}
	for i := range 4 {
		st := f.call(t, "alg", override("bucket", 4)).Statuses[0]
		if st.Code != okCode || st.LimitRemaining != uint32(3-i) || st.DurationUntilReset.AsDuration() != time.Duration(i+1)*250*time.Millisecond {
			t.Fatalf("override call %d: %v remaining %d reset %v", i, st.Code, st.LimitRemaining, st.DurationUntilReset.AsDuration())
		}
	}
	if st := f.call(t, "alg", override("bucket", 4)).Statuses[0]; st.Code != overCode {
		t.Errorf("fifth call of a bucket of 4: %v, want OVER_LIMIT", st.Code)
	}
	// 10 a year is a token every 36.5 days: a bucket fills within
	// window.MaxBucketSpan (about 104 days) with 2 of them, which is its
	// burst then.
	yearly := override("bucket", 10)
	yearly.Limit.Unit = typev3.RateLimitUnit_YEAR
	for i, want := range []uint32{1, 0} {
		if st := f.call(t, "alg", yearly).Statuses[0]; st.Code != okCode || st.LimitRemaining != want {
			t.Errorf("yearly override call %d: %v remaining %d, want OK %d", i, st.Code, st.LimitRemaining, want)
		}
	}
	if st := f.call(t, "alg", yearly).Statuses[0]; st.Code != overCode {
		t.Errorf("third call of a yearly bucket of 10: %v, want OVER_LIMIT", st.Code)
	}
	for range 3 {
		f.call(t, "alg", override("log", 3))
	}
	if st := f.call(t, "alg", override("log", 3)).Statuses[0]; st.Code != overCode || st.DurationUntilReset.AsDuration() != time.Second {
		t.Errorf("fourth call of a log of 3: %v reset %v, want OVER_LIMIT 1s", st.Code, st.DurationUntilReset.AsDuration())
	}
	_, err := f.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "alg", Descriptors: []*rlv3.RateLimitDescriptor{override("log", 10001)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "sliding_log") {
		t.Errorf("override of a log above the cap: %v, want InvalidArgument", err)
	}
}

// TestAlgorithmObserver: near_limit and Used count against the bucket's
// burst, not its rate, so a burst above the rate never underflows; a
// sliding log's Used is its entries.
func TestAlgorithmObserver(t *testing.T) {
	t.Parallel()
	rec := &usedRecorder{}
	f := newFixture(t, window.NewMemory(), algorithmRules, func(o *Options) { o.Observer = rec })
	for range 11 {
		f.call(t, "alg", desc("wide", "k"))
	}
	for range 6 {
		f.call(t, "alg", desc("logged", "k"))
	}
	// A charge of 20 on the full log adds 6 entries (its limit + 1), and
	// its Used is still the 5 the log held.
	charge := desc("logged", "k")
	charge.HitsAddend = wrapperspb.UInt64(20)
	f.call(t, "alg", charge)
	want := []string{
		"ok 0 8", "ok 1 8", "ok 2 8", "ok 3 8", "ok 4 8", "ok 5 8", "ok 6 8", "ok 7 8",
		"near_limit 8 8", "near_limit 9 8", "over_limit 10 8",
		"ok 0 4", "ok 1 4", "ok 2 4", "ok 3 4", "near_limit 4 4", "over_limit 5 4", "over_limit 5 4",
	}
	if strings.Join(rec.got, ",") != strings.Join(want, ",") {
		t.Errorf("decisions (outcome used near) = %q, want %q", rec.got, want)
	}
}

// usedRecorder keeps each decision's outcome, Used and NearLimit.
type usedRecorder struct{ got []string }

func (r *usedRecorder) Decision(d Decision) {
	r.got = append(r.got, strings.Join([]string{d.Outcome.String(), u64(d.Used), u64(d.NearLimit)}, " "))
}
func (r *usedRecorder) StoreCall(time.Duration, error) {}
func (r *usedRecorder) InvalidRequest()                {}
func (r *usedRecorder) Admission(Admission)            {}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }
