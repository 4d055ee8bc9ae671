package envoyrls

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

const (
	okCode   = rlsv3.RateLimitResponse_OK
	overCode = rlsv3.RateLimitResponse_OVER_LIMIT
)

// testRules are the rules of the semantic suite.
const testRules = `
domain: api
descriptors:
  - key: api_key
    # Admission: a stated cost that does not fit is refused and counts nothing.
    over_limit: refuse
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_key}
    descriptors:
      - key: path
        rate_limit: {unit: second, unit_multiplier: 90, requests_per_unit: 2}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: tier
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 10, name: gold, replaces: [{name: base}]}
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, name: base}
  - key: multi
    rate_limits:
      - {unit: hour, requests_per_unit: 5}
      - {unit: minute, requests_per_unit: 2}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
`

// t0 is 15 s into a minute window.
var t0 = time.UnixMilli(1_763_800_020_000).Add(15 * time.Second)

type fixture struct {
	srv   *Server
	store window.Store
	now   atomic.Int64 // Unix ms
}

func (f *fixture) advance(d time.Duration) { f.now.Add(d.Milliseconds()) }

func newFixture(t *testing.T, store window.Store, rules string, opts ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{store: store}
	f.now.Store(t0.UnixMilli())
	o := Options{Store: store, Rules: mustRules(t, rules), Now: func() time.Time { return time.UnixMilli(f.now.Load()) }}
	for _, fn := range opts {
		fn(&o)
	}
	srv, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	return f
}

// storeKinds are the stores the semantic suite runs against; each Redis
// fixture gets its own redis-server.
var storeKinds = map[string]func(t *testing.T) window.Store{
	"memory": func(t *testing.T) window.Store { return window.NewMemory() },
	"redis": func(t *testing.T) window.Store {
		return redisstore.New(redistest.Start(t).Client(t), redisstore.Options{})
	},
}

func desc(kv ...string) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: entries(kv...)}
}

func entries(kv ...string) []*rlv3.RateLimitDescriptor_Entry {
	var out []*rlv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// mustRules parses one rules file held in src.
func mustRules(t testing.TB, src string) *rules.Set {
	t.Helper()
	r, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(src)})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	return r
}

func (f *fixture) call(t *testing.T, domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := f.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

func codes1(resp *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
	out := []rlsv3.RateLimitResponse_Code{resp.OverallCode}
	for _, s := range resp.Statuses {
		out = append(out, s.Code)
	}
	return out
}

func sameCodes(got []rlsv3.RateLimitResponse_Code, want ...rlsv3.RateLimitResponse_Code) bool {
	return slices.Equal(got, want)
}

// TestSemantics is the server's semantic suite, run over both stores.
func TestSemantics(t *testing.T) {
	t.Parallel()
	for kind, newStore := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			t.Run("limit, statuses and the 429 body", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				for i := range 3 {
					resp := f.call(t, "api", desc("api_key", "alice"))
					st := resp.Statuses[0]
					if resp.OverallCode != okCode || st.LimitRemaining != uint32(2-i) {
						t.Fatalf("call %d: %v remaining %d, want OK %d", i, resp.OverallCode, st.LimitRemaining, 2-i)
					}
					cl := st.CurrentLimit
					if cl.RequestsPerUnit != 3 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.Name != "per_key" || cl.UnitMultiplier != nil {
						t.Errorf("current_limit = %v", cl)
					}
					if got := st.DurationUntilReset.AsDuration(); got != 45*time.Second {
						t.Errorf("duration_until_reset = %v, want 45s", got)
					}
				}
				f.advance(10*time.Second + 300*time.Millisecond)
				resp := f.call(t, "api", desc("remote_address", "10.0.0.1"), desc("api_key", "alice"))
				if !sameCodes(codes1(resp), overCode, okCode, overCode) {
					t.Fatalf("codes = %v, want OVER, OK, OVER", codes1(resp))
				}
				if got := resp.Statuses[1].DurationUntilReset.AsDuration(); got != 34700*time.Millisecond {
					t.Errorf("duration_until_reset = %v, want 34.7s", got)
				}
				h := map[string]string{}
				for _, hv := range resp.ResponseHeadersToAdd {
					h[hv.Key] = hv.Value
				}
				if h["retry-after"] != "35" || h["content-type"] != "application/json" {
					t.Errorf("headers = %v, want retry-after 35 and JSON", h)
				}
				var body map[string]any
				if err := json.Unmarshal(resp.RawBody, &body); err != nil {
					t.Fatalf("body %q: %v", resp.RawBody, err)
				}
				if body["error"] != "too_many_requests" || body["retry_after_seconds"] != 35.0 || body["domain"] != "api" || body["message"] == "" {
					t.Errorf("body = %v", body)
				}
				// The denied request did not count the address either.
				if st := f.call(t, "api", desc("remote_address", "10.0.0.1")).Statuses[0]; st.LimitRemaining != 99 {
					t.Errorf("remote_address remaining = %d after a denied request, want 99 (nothing consumed)", st.LimitRemaining)
				}
				f.advance(35 * time.Second) // next window
				if resp := f.call(t, "api", desc("api_key", "alice")); resp.OverallCode != okCode {
					t.Errorf("after the window: %v, want OK", resp.OverallCode)
				}
			})
			t.Run("unknown domain and unmatched descriptors are OK without a limit", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				for _, domain := range []string{"nope", "api"} {
					resp := f.call(t, domain, desc("who", "x"), desc("api_key", "a", "extra", "b"))
					if !sameCodes(codes1(resp), okCode, okCode, okCode) || resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit != nil {
						t.Errorf("%s: %v", domain, resp)
					}
				}
			})
			t.Run("nested descriptor with a custom window", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				st := f.call(t, "api", desc("api_key", "bob", "path", "/x")).Statuses[0]
				// 90 s windows: t0 is 1763800035000 ms, window [1763800020000, +90000).
				if st.CurrentLimit.UnitMultiplier.GetValue() != 90 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND || st.LimitRemaining != 1 {
					t.Errorf("status = %v", st)
				}
				if got, want := st.DurationUntilReset.AsDuration(), time.Duration(90_000-(t0.UnixMilli()%90_000))*time.Millisecond; got != want {
					t.Errorf("duration_until_reset = %v, want %v", got, want)
				}
			})
			t.Run("shadow mode counts but never denies", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				f.call(t, "api", desc("shadow", "s"))
				resp := f.call(t, "api", desc("shadow", "s"))
				if resp.OverallCode != okCode || resp.Statuses[0].Code != okCode || resp.Statuses[0].LimitRemaining != 0 {
					t.Errorf("shadow over limit: %v", resp)
				}
			})
			t.Run("unlimited never limits and zero always does", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				for range 5 {
					if resp := f.call(t, "api", desc("free", "x")); resp.OverallCode != okCode || resp.Statuses[0].CurrentLimit != nil {
						t.Fatalf("unlimited: %v", resp)
					}
				}
				if resp := f.call(t, "api", desc("zero", "x")); resp.OverallCode != overCode {
					t.Errorf("zero limit: %v, want OVER_LIMIT", resp.OverallCode)
				}
			})
			t.Run("replaces drops the named limit for the request", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				for i := range 3 {
					resp := f.call(t, "api", desc("tier", "gold"), desc("base", "b"))
					if resp.OverallCode != okCode || resp.Statuses[1].CurrentLimit != nil {
						t.Fatalf("call %d with gold: %v", i, codes1(resp))
					}
				}
				f.call(t, "api", desc("base", "b"))
				if resp := f.call(t, "api", desc("base", "b")); resp.OverallCode != overCode {
					t.Errorf("base alone twice: %v, want OVER_LIMIT", resp.OverallCode)
				}
			})
			t.Run("several limits on one descriptor report the tightest", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				st := f.call(t, "api", desc("multi", "m")).Statuses[0]
				if st.CurrentLimit.RequestsPerUnit != 2 || st.LimitRemaining != 1 {
					t.Errorf("first: %v", st)
				}
				f.call(t, "api", desc("multi", "m"))
				resp := f.call(t, "api", desc("multi", "m"))
				if resp.OverallCode != overCode || resp.Statuses[0].CurrentLimit.RequestsPerUnit != 2 {
					t.Errorf("third in a minute: %v", resp)
				}
				f.advance(time.Minute)
				f.call(t, "api", desc("multi", "m"))
				f.call(t, "api", desc("multi", "m")) // 4 of 5 in the hour
				f.advance(time.Minute)
				st = f.call(t, "api", desc("multi", "m")).Statuses[0]
				if st.Code != okCode || st.CurrentLimit.RequestsPerUnit != 5 || st.LimitRemaining != 0 {
					t.Errorf("5th in the hour: %v, want OK reporting the hourly limit with 0 left", st)
				}
				resp = f.call(t, "api", desc("multi", "m"))
				if resp.OverallCode != overCode || resp.Statuses[0].CurrentLimit.RequestsPerUnit != 5 {
					t.Errorf("6th in the hour: %v, want the hourly limit over", resp)
				}
			})
			t.Run("hits_addend", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				take := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
					t.Helper()
					resp, err := f.srv.ShouldRateLimit(context.Background(), req)
					if err != nil {
						t.Fatalf("ShouldRateLimit: %v", err)
					}
					return resp
				}
				if resp := take(&rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "h")}}); resp.Statuses[0].LimitRemaining != 1 {
					t.Fatalf("request hits 2: %v, want 1 left", resp)
				}
				d := desc("api_key", "h")
				d.HitsAddend = wrapperspb.UInt64(0) // check only
				if resp := take(&rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 5, Descriptors: []*rlv3.RateLimitDescriptor{d}}); resp.OverallCode != okCode || resp.Statuses[0].LimitRemaining != 1 {
					t.Errorf("check only: %v", resp)
				}
				d.HitsAddend = wrapperspb.UInt64(2)
				if resp := take(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{d}}); resp.OverallCode != overCode {
					t.Errorf("2 more hits with 1 left: %v, want OVER_LIMIT", resp.OverallCode)
				}
				d.IsNegativeHits = true
				if resp := take(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{d}}); resp.OverallCode != okCode || resp.Statuses[0].LimitRemaining != 3 {
					t.Errorf("refund of 2: %v, want OK with 3 left", resp)
				}
			})
			t.Run("override replaces the limit and is keyed apart", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				d := desc("api_key", "o")
				d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(30)}
				resp := f.call(t, "api", d)
				cl := resp.Statuses[0].CurrentLimit
				if resp.OverallCode != okCode || cl.RequestsPerUnit != 1 || cl.UnitMultiplier.GetValue() != 30 {
					t.Fatalf("override: %v", resp)
				}
				if resp := f.call(t, "api", d); resp.OverallCode != overCode {
					t.Errorf("second override call: %v, want OVER_LIMIT", resp.OverallCode)
				}
				if st := f.call(t, "api", desc("api_key", "o")).Statuses[0]; st.LimitRemaining != 2 {
					t.Errorf("configured limit after override hits: remaining %d, want 2 (keyed apart)", st.LimitRemaining)
				}
			})
			t.Run("sliding window", func(t *testing.T) {
				f := newFixture(t, store, testRules)
				for range 10 {
					f.call(t, "api", desc("sliding", "s"))
				}
				f.advance(time.Minute) // 15 s into the next window: 3/4 of 10 still weigh
				resp := f.call(t, "api", desc("sliding", "s"))
				if resp.OverallCode != okCode || resp.Statuses[0].LimitRemaining != 1 {
					t.Fatalf("first in the next window: %v (estimate 7.5+1)", resp)
				}
				resp = f.call(t, "api", desc("sliding", "s"))
				if resp.OverallCode != okCode {
					t.Fatalf("second: %v", resp)
				}
				resp = f.call(t, "api", desc("sliding", "s"))
				if resp.OverallCode != overCode || resp.Statuses[0].DurationUntilReset.AsDuration() <= 0 {
					t.Errorf("third (9.5 + 1 > 10): %v, want OVER_LIMIT with a wait", resp)
				}
			})
		})
	}
}

func TestInvalidRequestsCountNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), testRules, func(o *Options) { o.Limits = InputLimits{MaxDescriptors: 3, MaxEntryBytes: 16, MaxHits: 100} })
	long := string(make([]byte, 17))
	zeroMult := desc("api_key", "v")
	zeroMult.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}
	badUnit := desc("api_key", "v")
	badUnit.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	hugeMult := desc("api_key", "v")
	hugeMult.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(1 << 31)}
	manyHits := desc("api_key", "v")
	manyHits.HitsAddend = wrapperspb.UInt64(1 << 63)
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		msg  string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "v")}}, "domain is empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "api"}, "no descriptors"},
		{"descriptor without entries", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "v"), {}}}, "descriptor 1 has no entries"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "v", "", "x")}}, "descriptor 0 entry 1 has an empty key"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "1"), desc("a", "2"), desc("a", "3"), desc("a", "4")}}, "4 descriptors, more than 3"},
		{"long value", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", long)}}, "longer than 16 bytes"},
		{"invalid UTF-8", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "\xff")}}, "not valid UTF-8"},
		{"too many hits", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "v"), manyHits}}, "hits_addend 9223372036854775808 is more than 100"},
		{"override multiplier zero", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "v"), zeroMult}}, "unit_multiplier 0"},
		{"override without unit", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{badUnit}}, "limit override has unit UNKNOWN"},
		{"override window too long", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{hugeMult}}, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.srv.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Errorf("err = %v, want InvalidArgument with %q", err, tt.msg)
			}
		})
	}
	if st := f.call(t, "api", desc("api_key", "v")).Statuses[0]; st.LimitRemaining != 2 {
		t.Errorf("remaining after invalid requests = %d, want 2 (nothing counted)", st.LimitRemaining)
	}
}

// failingStore always fails, as a dead Redis does.
type failingStore struct{}

func (failingStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	return false, errors.Join(window.ErrStore, errors.New("connection refused"))
}
func (failingStore) Ping(ctx context.Context) error { return window.ErrStore }

// TestReplacesIgnoresOrder: which limits apply must not depend on the order
// of the descriptors. Here a replaces d and is itself replaced by b: d is
// dropped (a matched limit names it) as well as a, in either order.
func TestReplacesIgnoresOrder(t *testing.T) {
	t.Parallel()
	rules := `
domain: r
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1, name: a, replaces: [{name: d}]}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1, name: b, replaces: [{name: a}]}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 1, name: c}
  - key: d
    rate_limit: {unit: minute, requests_per_unit: 1, name: d}
`
	ds := []*rlv3.RateLimitDescriptor{desc("a", "1"), desc("b", "1"), desc("c", "1"), desc("d", "1")}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}} {
		f := newFixture(t, window.NewMemory(), rules)
		req := make([]*rlv3.RateLimitDescriptor, len(order))
		for i, o := range order {
			req[i] = ds[o]
		}
		resp := f.call(t, "r", req...)
		var applied []string
		for i, st := range resp.Statuses {
			if st.CurrentLimit != nil {
				applied = append(applied, ds[order[i]].Entries[0].Key)
			}
		}
		slices.Sort(applied)
		if got := strings.Join(applied, ","); got != "b,c" {
			t.Errorf("order %v: limits applied to %s, want b,c", order, got)
		}
	}
}

func TestFailureModes(t *testing.T) {
	t.Parallel()
	rules := `
domain: fm
failure_mode: allow
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: closed
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: strict
    failure_mode: error
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: inherits
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: overrides
        failure_mode: allow
        rate_limit: {unit: minute, requests_per_unit: 1}
`
	f := newFixture(t, failingStore{}, rules)
	tests := []struct {
		name  string
		descs []*rlv3.RateLimitDescriptor
		code  codes.Code // OK means a response
		want  []rlsv3.RateLimitResponse_Code
	}{
		{"allow", []*rlv3.RateLimitDescriptor{desc("open", "x")}, codes.OK, []rlsv3.RateLimitResponse_Code{okCode, okCode}},
		{"deny", []*rlv3.RateLimitDescriptor{desc("closed", "x")}, codes.OK, []rlsv3.RateLimitResponse_Code{overCode, overCode}},
		{"error", []*rlv3.RateLimitDescriptor{desc("strict", "x")}, codes.Unavailable, nil},
		{"error inherited", []*rlv3.RateLimitDescriptor{desc("strict", "x", "inherits", "y")}, codes.Unavailable, nil},
		{"nearest wins", []*rlv3.RateLimitDescriptor{desc("strict", "x", "overrides", "y")}, codes.OK, []rlsv3.RateLimitResponse_Code{okCode, okCode}},
		{"deny beats error", []*rlv3.RateLimitDescriptor{desc("strict", "x"), desc("closed", "x"), desc("open", "x")}, codes.OK, []rlsv3.RateLimitResponse_Code{overCode, okCode, overCode, okCode}},
		{"error beats allow", []*rlv3.RateLimitDescriptor{desc("open", "x"), desc("strict", "x")}, codes.Unavailable, nil},
		{"no limit needs no store", []*rlv3.RateLimitDescriptor{desc("unknown", "x")}, codes.OK, []rlsv3.RateLimitResponse_Code{okCode, okCode}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "fm", Descriptors: tt.descs})
			if status.Code(err) != tt.code {
				t.Fatalf("err = %v, want code %v", err, tt.code)
			}
			if err != nil {
				return
			}
			if !sameCodes(codes1(resp), tt.want...) {
				t.Errorf("codes = %v, want %v", codes1(resp), tt.want)
			}
			if resp.OverallCode == overCode {
				// A failed counter that fails closed reads as full until its
				// window ends: t0 is 15 s into a minute, so 45 s after t0.
				if len(resp.ResponseHeadersToAdd) == 0 || resp.ResponseHeadersToAdd[0].Key != "retry-after" || resp.ResponseHeadersToAdd[0].Value != "45" {
					t.Errorf("deny headers %v, want retry-after 45 first", resp.ResponseHeadersToAdd)
				}
				for i, st := range resp.Statuses {
					if st.Code != overCode {
						continue
					}
					if l := st.CurrentLimit; l == nil || l.RequestsPerUnit != 1 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
						st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != 45*time.Second {
						t.Errorf("status %d = %v, want 1 per minute, none remaining, reset in 45s", i, st)
					}
				}
			}
		})
	}
}

// TestStoreCallIsBoundedByDeadline: against a hung redis-server the server
// answers Unavailable when the store's bound passes (its Timeout, or 9/10 of
// the way to the caller's deadline), not at go-redis's own timeouts.
func TestStoreCallIsBoundedByDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// As the sidecar makes its client: deadlines bound calls, no retries.
	client := srv.BoundedClient(t)
	f := newFixture(t, redisstore.New(client, redisstore.Options{Timeout: 2 * time.Second}), testRules)
	// A first call leaves a pooled connection. Then the server hangs
	// (SIGSTOP) rather than stops: a stopped one refuses connections at
	// once, which would answer fast whatever the bound.
	f.call(t, "api", desc("api_key", "warm"))
	srv.Pause(t)
	for _, tt := range []struct {
		deadline time.Duration // of the caller's context; 0: none
		want     time.Duration // the bound
	}{
		{0, 2 * time.Second},                          // the store's Timeout
		{10 * time.Millisecond, 9 * time.Millisecond}, // 9/10 of the caller's
	} {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if tt.deadline > 0 {
			ctx, cancel = context.WithTimeout(ctx, tt.deadline)
		}
		start := time.Now()
		_, err := f.srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "hung")}})
		d := time.Since(start)
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("deadline %v: err = %v, want Unavailable", tt.deadline, err)
		}
		// Not before the bound (less a little: the clock reads in and out
		// of the store differ) and not much after (scheduling slack). The
		// slack stays under half the store's Timeout, so a call that
		// ignored the caller's deadline would fail the second case; the
		// Timeout is long so that a loaded CI machine's slack fits.
		if d < tt.want-5*time.Millisecond || d > tt.want+900*time.Millisecond {
			t.Errorf("deadline %v: answered after %v, want about %v", tt.deadline, d, tt.want)
		}
	}
}

// TestStoreErrorsAreTheStores: a call whose caller went away while a hung
// redis-server held it (Envoy reset it, or a load generator cancelled its
// calls in flight) is not a store error; one the store's own bound ended is.
func TestStoreErrorsAreTheStores(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rec := &recorder{}
	f := newFixture(t, redisstore.New(srv.BoundedClient(t), redisstore.Options{Timeout: 300 * time.Millisecond}), testRules,
		func(o *Options) { o.Observer = rec })
	f.call(t, "api", desc("api_key", "warm"))
	srv.Pause(t)
	call := func(ctx context.Context) {
		t.Helper()
		_, err := f.srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "hung")}})
		if err == nil {
			t.Fatal("answered by a hung redis-server")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	call(ctx)
	rec.mu.Lock()
	gone := len(rec.storeErrors)
	rec.mu.Unlock()
	if gone != 0 {
		t.Errorf("a call its caller cancelled counted %d store errors, want 0: %v", gone, rec.storeErrors)
	}
	call(context.Background())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.storeErrors) != 1 {
		t.Errorf("a call the store's bound ended counted %d store errors, want 1", len(rec.storeErrors))
	}
}

// slowOK is a store timeout for exactness tests: under -race on a shared
// machine they are about counts, not latency.
var slowOK = redisstore.Options{Timeout: 5 * time.Second}

// TestTwoReplicasAdmitExactlyTheLimit: many goroutines against two servers
// sharing one Redis admit exactly the limit per window.
func TestTwoReplicasAdmitExactlyTheLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 50}\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 100000}\n"
	replicas := []*fixture{
		newFixture(t, redisstore.New(srv.Client(t), slowOK), rules),
		newFixture(t, redisstore.New(srv.Client(t), slowOK), rules),
	}
	var admitted, errs atomic.Int64
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := replicas[w%2]
			for range 10 {
				resp, err := f.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "c", Descriptors: []*rlv3.RateLimitDescriptor{desc("ip", "1.2.3.4"), desc("k", "shared")}})
				if err != nil {
					errs.Add(1)
					continue
				}
				if resp.OverallCode == okCode {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 || admitted.Load() != 50 {
		t.Errorf("admitted %d of 200 with %d errors, want exactly 50 and none", admitted.Load(), errs.Load())
	}
	if st := replicas[0].call(t, "c", desc("ip", "1.2.3.4")).Statuses[0]; st.LimitRemaining != 100000-51 {
		t.Errorf("ip remaining = %d, want %d: denied requests must not count", st.LimitRemaining, 100000-51)
	}
}

// partialStore answers through a Memory store but fails, as one down Redis
// Cluster node does, every request whose key holds fail.
type partialStore struct {
	*window.Memory
	fail string
}

func (p partialStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	var ok []window.Counter
	var okIdx, failed []int
	for i, r := range reqs {
		if strings.Contains(r.Key, p.fail) {
			failed = append(failed, i)
			continue
		}
		ok = append(ok, r)
		okIdx = append(okIdx, i)
	}
	sub := make([]window.Result, len(ok))
	allowed, _ := p.Memory.Take(ctx, now, ok, sub)
	for j, i := range okIdx {
		res[i] = sub[j]
	}
	return allowed, &window.PartialError{Failed: failed, Err: window.ErrStore}
}

func TestPartialStoreFailure(t *testing.T) {
	t.Parallel()
	rules := `
domain: p
descriptors:
  - key: healthy
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: down_allow
    failure_mode: allow
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: down_deny
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: down_error
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	mem := window.NewMemory()
	f := newFixture(t, partialStore{mem, "down_"}, rules)
	count := func() uint32 {
		t.Helper()
		return newFixture(t, mem, rules).call(t, "p", desc("healthy", "h")).Statuses[0].LimitRemaining
	}
	// Answered counters decide; the failed one allows.
	resp := f.call(t, "p", desc("healthy", "h"), desc("down_allow", "x"))
	if !sameCodes(codes1(resp), okCode, okCode, okCode) || resp.Statuses[0].LimitRemaining != 4 || resp.Statuses[1].CurrentLimit != nil {
		t.Fatalf("allow: %v", resp)
	}
	// A failed deny refuses the request and gives the healthy counter back.
	resp = f.call(t, "p", desc("healthy", "h"), desc("down_deny", "x"))
	if !sameCodes(codes1(resp), overCode, okCode, overCode) || resp.ResponseHeadersToAdd[0].Key != "retry-after" {
		t.Fatalf("deny: %v", resp)
	}
	// A failed error is Unavailable, and also gives the hits back.
	if _, err := f.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "p", Descriptors: []*rlv3.RateLimitDescriptor{desc("healthy", "h"), desc("down_error", "x")}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("error: %v, want Unavailable", err)
	}
	// Only the first request was admitted: 5 - 1 - this check's own hit.
	if got := count(); got != 3 {
		t.Errorf("healthy remaining = %d, want 3 (refused requests refunded)", got)
	}
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu          sync.Mutex
	decisions   []string // "domain/rule/value/outcome"
	storeErrors []error
}

func (r *recorder) Decision(d Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions = append(r.decisions, d.Domain+"/"+d.Limit.Rule+"/"+d.Value+"/"+d.Outcome.String())
}
func (r *recorder) StoreCall(_ time.Duration, err error) {
	if err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.storeErrors = append(r.storeErrors, err)
	}
}
func (r *recorder) InvalidRequest()     {}
func (r *recorder) Admission(Admission) {}

func TestObserverLabels(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	rules := testRules + "  - key: detailed\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	f := newFixture(t, window.NewMemory(), rules, func(o *Options) { o.Observer = rec })
	override := desc("anything", "x")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	f.call(t, "client-chosen-domain", override)
	f.call(t, "api", desc("api_key", "secret"), desc("detailed", "d1"))
	f.call(t, "api", desc("zero", "z"))
	got := rec.decisions
	if len(got) != 4 {
		t.Fatalf("decisions = %q, want 4", got)
	}
	// An override's 1 per minute has 0 left: near_limit; the value is a
	// label only where detailed_metric asks for it.
	for i, w := range []string{"unknown/override//near_limit", "api/per_key//ok", "api/detailed/d1/ok", "api/zero//over_limit"} {
		if got[i] != w {
			t.Errorf("decision %d = %q, want %q", i, got[i], w)
		}
	}
}

// TestCachedDenialReportsLimits: a denial answered by the over-limit cache
// shows Envoy the same limits as one answered by the store.
func TestCachedDenialReportsLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewOverLimitCache(window.NewMemory()), testRules)
	for range 3 {
		f.call(t, "api", desc("api_key", "c"))
	}
	resp := f.call(t, "api", desc("remote_address", "1.1.1.1"), desc("api_key", "c"))
	if !sameCodes(codes1(resp), overCode, okCode, overCode) {
		t.Fatalf("codes = %v", codes1(resp))
	}
	if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.RequestsPerUnit != 100 {
		t.Errorf("skipped descriptor's current_limit = %v, want the configured 100", cl)
	}
	if st := resp.Statuses[1]; st.CurrentLimit.GetRequestsPerUnit() != 3 || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != 45*time.Second {
		t.Errorf("full descriptor = %v", st)
	}
	// The address was not counted by the cached denial.
	if st := f.call(t, "api", desc("remote_address", "1.1.1.1")).Statuses[0]; st.LimitRemaining != 99 {
		t.Errorf("address remaining = %d, want 99", st.LimitRemaining)
	}
}

// TestTooManyRequestsReuse: denials by one limit share one prepared 429
// body while retry-after stays the same, and get a new one, true to it,
// when it changes.
func TestTooManyRequestsReuse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewOverLimitCache(window.NewMemory()), testRules)
	for range 3 {
		f.call(t, "api", desc("api_key", "mallory"))
	}
	deny := func(wantSecs int64) *rlsv3.RateLimitResponse {
		t.Helper()
		resp := f.call(t, "api", desc("api_key", "mallory"))
		var body tooManyRequests
		if err := json.Unmarshal(resp.RawBody, &body); err != nil {
			t.Fatalf("body %q: %v", resp.RawBody, err)
		}
		want := tooManyRequests{Error: "too_many_requests", Message: "rate limit of 3 per minute exceeded (per_key)", RetryAfterSeconds: wantSecs, Domain: "api"}
		if resp.OverallCode != overCode || body != want || resp.ResponseHeadersToAdd[0].Value != strconv.FormatInt(wantSecs, 10) {
			t.Fatalf("%v: body %+v, retry-after %q; want OVER_LIMIT, %+v", resp.OverallCode, body, resp.ResponseHeadersToAdd[0].Value, want)
		}
		return resp
	}
	first := deny(45) // t0 is 15 s into its minute
	f.advance(300 * time.Millisecond)
	if again := deny(45); &again.RawBody[0] != &first.RawBody[0] {
		t.Error("a second denial with the same retry-after built its body anew")
	}
	f.advance(time.Second)
	if later := deny(44); &later.RawBody[0] == &first.RawBody[0] {
		t.Error("a denial with a new retry-after reused the old body")
	}
}

// TestShareThresholdCounters: with share_threshold every value a wildcard
// matches counts on one counter, keyed by the pattern, also when the limit
// is on a descriptor below the wildcard; without it each value has its own.
func TestShareThresholdCounters(t *testing.T) {
	t.Parallel()
	const shared = `
domain: s
descriptors:
  - key: files
    value: "files/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: own
    value: "own/*"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: route
    value: "api/*/users"
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
`
	type call struct {
		entries []string
		want    rlsv3.RateLimitResponse_Code
	}
	tests := []struct {
		name  string
		calls []call
	}{
		{"values share the pattern's counter", []call{
			{[]string{"files", "files/a.pdf"}, okCode},
			{[]string{"files", "files/b.csv"}, okCode},
			{[]string{"files", "files/c.txt"}, overCode},
			{[]string{"files", "files/*"}, overCode},
		}},
		{"without share_threshold each value has its own", []call{
			{[]string{"own", "own/a"}, okCode},
			{[]string{"own", "own/a"}, okCode},
			{[]string{"own", "own/a"}, overCode},
			{[]string{"own", "own/b"}, okCode},
		}},
		{"below the wildcard: shared per other entries' values", []call{
			{[]string{"route", "api/v1/users", "user", "alice"}, okCode},
			{[]string{"route", "api/v2/users", "user", "alice"}, okCode},
			{[]string{"route", "api/v3/users", "user", "alice"}, overCode},
			{[]string{"route", "api/v1/users", "user", "bob"}, okCode},
		}},
	}
	for kind, newStore := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				f := newFixture(t, newStore(t), shared)
				for i, c := range tt.calls {
					if got := f.call(t, "s", desc(c.entries...)).OverallCode; got != c.want {
						t.Errorf("%s: call %d %v = %v, want %v", tt.name, i, c.entries, got, c.want)
					}
				}
			}
		})
	}
}

// TestObserverValueToMetric: a limit under value_to_metric is observed with
// envoyproxy/ratelimit's label (request values where value_to_metric asks
// for them, the pattern where share_threshold keeps it); detailed_metric
// takes precedence; other limits get no request value.
func TestObserverValueToMetric(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	f := newFixture(t, window.NewMemory(), `
domain: v
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: shared
    value: "api/*"
    share_threshold: true
    value_to_metric: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 60}
`, func(o *Options) { o.Observer = rec })
	tests := []struct {
		entries []string
		want    string
	}{
		{[]string{"route", "draw", "http_method", "GET", "subject_id", "42"}, "v/route.http_method.subject_id/route_draw.http_method_GET.subject_id/ok"},
		{[]string{"shared", "api/v1"}, "v/shared_api/*/api/*/ok"},
		{[]string{"plain", "secret"}, "v/plain//ok"},
	}
	for _, tt := range tests {
		f.call(t, "v", desc(tt.entries...))
		rec.mu.Lock()
		got := rec.decisions[len(rec.decisions)-1]
		rec.mu.Unlock()
		if got != tt.want {
			t.Errorf("decision for %v = %q, want %q", tt.entries, got, tt.want)
		}
	}
}
