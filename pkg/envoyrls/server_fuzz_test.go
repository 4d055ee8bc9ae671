package envoyrls

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// FuzzShouldRateLimit drives the request path with hostile input: random
// domains, many descriptors, long and invalid UTF-8 values, hits near the
// integer limits and overrides with any unit and multiplier. It must never
// panic, must answer either InvalidArgument or one status per descriptor,
// and a counter must never report more room than its limit (no wrap).
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("api", "api_key", "alice", uint16(1), uint32(0), uint64(1), false, int32(0), uint32(0), uint32(0))
	f.Add("api", "api_key", "\xff\xfe", uint16(3), uint32(1), uint64(0), true, int32(1), uint32(1), uint32(5))
	f.Add("", "", "", uint16(0), uint32(0), uint64(0), false, int32(0), uint32(0), uint32(0))
	f.Add("api", "multi", strings.Repeat("v", 2000), uint16(5000), ^uint32(0), ^uint64(0), true, int32(6), ^uint32(0), ^uint32(0))
	f.Add("api", "sliding", "s", uint16(2), uint32(4294967295), uint64(1)<<53, false, int32(9), uint32(0), uint32(3))
	f.Add("api", "bucket", "b", uint16(4), uint32(2), uint64(4), true, int32(1), uint32(0), uint32(7))
	f.Add("api", "log", "l", uint16(3), uint32(0), uint64(20000), true, int32(2), uint32(1), uint32(10001))
	// The semantic suite's rules and a token bucket whose burst passes its
	// rate, and a sliding log. Safe for concurrent use, so shared by every
	// input.
	rules := mustRules(f, testRules+fuzzAlgorithms)
	f.Fuzz(func(t *testing.T, domain, key, value string, n uint16, reqHits uint32, hits uint64, useHits bool, unit int32, mult, rpu uint32) {
		srv, err := NewServer(Options{Store: window.NewMemory(), Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: reqHits}
		for i := range int(n % 2048) {
			d := desc(key, value)
			if i%3 == 1 {
				d = desc(key, value, "path", value)
			}
			if useHits {
				d.HitsAddend = wrapperspb.UInt64(hits)
				d.IsNegativeHits = i%2 == 0
			}
			if unit != 0 && i%2 == 1 {
				d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit(unit)}
				if mult != 0 || i%4 == 1 {
					d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
				}
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		for range 2 {
			resp, err := srv.ShouldRateLimit(context.Background(), req)
			if err != nil {
				if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
					t.Fatalf("err = %v, want InvalidArgument with a message", err)
				}
				return
			}
			if len(resp.Statuses) != len(req.Descriptors) {
				t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
			}
			for i, st := range resp.Statuses {
				if cl := st.CurrentLimit; cl != nil && st.LimitRemaining > max(cl.RequestsPerUnit, fuzzBursts[cl.Name]) {
					t.Fatalf("status %d: remaining %d above limit %d (burst %d)", i, st.LimitRemaining, cl.RequestsPerUnit, fuzzBursts[cl.Name])
				}
				if st.DurationUntilReset != nil && st.DurationUntilReset.AsDuration() < 0 {
					t.Fatalf("status %d: negative reset %v", i, st.DurationUntilReset.AsDuration())
				}
			}
		}
	})
}

// fuzzAlgorithms adds to testRules a limit of each algorithm beyond the
// windows; fuzzBursts holds, by name, the bursts that pass their rates.
const fuzzAlgorithms = `  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 5, name: bucket5}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
`

var fuzzBursts = map[string]uint32{"bucket5": 5}
