package rlqs

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

const fuzzRules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    value: "bot-*"
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 50, algorithm: token_bucket, burst: 10}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_log}
  - key: api_key
    descriptors:
      - key: path
        shadow_mode: true
        rate_limits:
          - {unit: minute, requests_per_unit: 3}
          - {unit: hour, requests_per_unit: 30, algorithm: sliding_window}
`

// FuzzReport: whatever the reports, handling them never panics, and every
// action sent is one Envoy 1.40 applies as meant: for a bucket of the
// report, with a TTL of whole seconds, at least 1 s, and a token bucket's
// fill_interval whole seconds, at least 1 s. The input is a stream of
// reports, each a marshalled RateLimitQuotaUsageReports behind a length
// byte, handled on one stream at clock steps of 2.5 s, with the pushes due.
func FuzzReport(f *testing.F) {
	seed := func(ms ...*rlqsv3.RateLimitQuotaUsageReports) {
		var in []byte
		for _, m := range ms {
			b, err := proto.Marshal(m)
			if err != nil || len(b) > 255 {
				f.Fatalf("seed: %v, %d bytes", err, len(b))
			}
			in = append(append(in, byte(len(b))), b...)
		}
		f.Add(in)
	}
	u := func(k, v string, secs int64, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{k: v}},
			TimeElapsed: &durationpb.Duration{Seconds: secs}, NumRequestsAllowed: allowed, NumRequestsDenied: denied}
	}
	seed(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		u("user", "a", 0, 1, 0), u("tb", "x", 0, 1, 0), u("log", "y", 0, 1, 0), u("user", "vip", 0, 1, 0), u("user", "bot-1", 0, 0, 1)}},
		&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			u("user", "a", 5, 200, 0), u("tb", "x", 5, 100, 3), u("log", "y", 5, 9, 9), u("user", "", -1, 1, 0)}})
	seed(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"api_key": "k", "path": "/"}}, NumRequestsAllowed: 1 << 62}}})
	seed(&rlqsv3.RateLimitQuotaUsageReports{})
	set, err := rules.Parse([]string{"r.yaml"}, map[string][]byte{"r.yaml": []byte(fuzzRules)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
		store := window.NewMemory()
		rls, err := envoyrls.NewServer(envoyrls.Options{Store: store, Rules: set, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Options{Counters: rls, Store: store, Ledger: NewMemory(Policy{}), Now: func() time.Time { return now }, MaxBuckets: 8})
		if err != nil {
			t.Fatal(err)
		}
		st := newStream(s, "fuzz")
		defer st.close()
		for len(in) > 0 {
			n := min(int(in[0]), len(in)-1)
			msg, rest := in[1:1+n], in[1+n:]
			in = rest
			var m rlqsv3.RateLimitQuotaUsageReports
			if proto.Unmarshal(msg, &m) != nil {
				continue
			}
			resp, err := st.handle(context.Background(), &m)
			if err != nil {
				return // the stream ends
			}
			checkActions(t, &m, resp)
			now = now.Add(2500 * time.Millisecond)
			checkActions(t, nil, st.push(context.Background(), now))
		}
	})
}

// checkActions checks every action of resp: its bucket is one of m's
// (when m is not nil), and it is one Envoy 1.40 applies as meant.
func checkActions(t *testing.T, m *rlqsv3.RateLimitQuotaUsageReports, resp *rlqsv3.RateLimitQuotaResponse) {
	t.Helper()
	reported := map[string]bool{}
	for _, u := range m.GetBucketQuotaUsages() {
		reported[bucketKey(u.GetBucketId().GetBucket())] = true
	}
	for _, a := range resp.GetBucketAction() {
		if len(a.GetBucketId().GetBucket()) == 0 || m != nil && !reported[bucketKey(a.GetBucketId().GetBucket())] {
			t.Fatalf("action for a bucket not reported: %v", a)
		}
		if a.GetAbandonAction() != nil {
			continue
		}
		q := a.GetQuotaAssignmentAction()
		if ttl := q.GetAssignmentTimeToLive(); ttl.GetSeconds() < 1 || ttl.GetNanos() != 0 {
			t.Fatalf("TTL %v: want whole seconds, at least 1", ttl)
		}
		s := q.GetRateLimitStrategy()
		if tb := s.GetTokenBucket(); tb != nil {
			if fi := tb.GetFillInterval(); fi.GetSeconds() < 1 || fi.GetNanos() != 0 || tb.GetMaxTokens() < 1 || tb.GetTokensPerFill().GetValue() < 1 {
				t.Fatalf("token bucket %v: not one Envoy 1.40 applies as meant", tb)
			}
		} else if _, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok {
			t.Fatalf("no strategy: %v", a)
		}
	}
}
