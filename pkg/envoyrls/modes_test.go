package envoyrls

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// modeRules have three quota-mode limits and two plain ones.
const modeRules = `
domain: q
descriptors:
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota_h
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: closed
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// keyOf is the key of l's counter for d, as setKeys builds it.
func (s *Server) keyOf(domain string, d *rlv3.RateLimitDescriptor, l *rules.Limit) string {
	return string(window.AppendKeyCounter(s.appendKeyHead(nil, domain, d.Entries, l), l.Index(), l.Algorithm))
}

// count reads the counter of d's first limit without counting.
func (f *fixture) count(t *testing.T, domain string, d *rlv3.RateLimitDescriptor) uint64 {
	t.Helper()
	l := f.srv.Rules().Domain(domain).Match(d.Entries)[0]
	key := f.srv.keyOf(domain, d, l)
	res := make([]window.Result, 1)
	req := []window.Counter{{Key: key, Limit: uint64(l.RequestsPerUnit), Size: l.Size, Shadow: true}}
	if _, err := f.store.Take(context.Background(), time.UnixMilli(f.now.Load()), req, res); err != nil {
		t.Fatalf("reading %v: %v", d.Entries, err)
	}
	return res[0].Count
}

// modeCase is one request after some others, and what it must answer
// and leave counted.
type modeCase struct {
	name      string
	before    []string // single-entry descriptors (key=x) sent alone first, one request each
	keys      []string // the request's descriptors, key=x each
	want      []rlsv3.RateLimitResponse_Code
	remaining []uint32 // per status
	counts    []uint64 // per descriptor of keys, after the request
}

// runModeCases runs each case on its own key prefix of one store per store
// kind, with the options opts sets.
func runModeCases(t *testing.T, cases []modeCase, opts func(*Options)) {
	for kind, mk := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			store := mk(t)
			for i, tt := range cases {
				t.Run(tt.name, func(t *testing.T) {
					f := newFixture(t, store, modeRules, opts, func(o *Options) { o.KeyPrefix = fmt.Sprintf("case%d", i) })
					for _, k := range tt.before {
						f.call(t, "q", desc(k, "x"))
					}
					var ds []*rlv3.RateLimitDescriptor
					for _, k := range tt.keys {
						ds = append(ds, desc(k, "x"))
					}
					resp := f.call(t, "q", ds...)
					if got := codes1(resp); !sameCodes(got, tt.want...) {
						t.Errorf("codes = %v, want %v", got, tt.want)
					}
					for j, st := range resp.Statuses {
						if st.LimitRemaining != tt.remaining[j] || st.CurrentLimit == nil {
							t.Errorf("status %d = %v, want %d remaining and a current_limit", j, st, tt.remaining[j])
						}
					}
					if resp.OverallCode == okCode && (resp.RawBody != nil || resp.ResponseHeadersToAdd != nil) {
						t.Errorf("OK with 429 parts: %v, %s", resp.ResponseHeadersToAdd, resp.RawBody)
					}
					for j, d := range ds {
						if got := f.count(t, "q", d); got != tt.counts[j] {
							t.Errorf("%s counted %d, want %d", tt.keys[j], got, tt.counts[j])
						}
					}
				})
			}
		})
	}
}

// TestQuotaMode: as envoyproxy/ratelimit's service since its #1059, a
// quota-mode limit that is over makes its status OVER_LIMIT (nothing
// remaining) but the request OVER_LIMIT only when every quota descriptor
// of it is over; a plain limit that is over still denies. An allowed
// request counts every counter, the spent quota ones too (as shadow_mode
// limits are counted); a denied one counts none, whichever rule denied it.
func TestQuotaMode(t *testing.T) {
	t.Parallel()
	runModeCases(t, []modeCase{
		{name: "quota under", keys: []string{"quota_b"},
			want: []rlsv3.RateLimitResponse_Code{okCode, okCode}, remaining: []uint32{1}, counts: []uint64{1}},
		{name: "quota over alone: denied, nothing counted", before: []string{"quota_a"}, keys: []string{"quota_a"},
			want: []rlsv3.RateLimitResponse_Code{overCode, overCode}, remaining: []uint32{0}, counts: []uint64{1}},
		{name: "every quota over: denied, nothing counted", before: []string{"quota_a", "quota_b", "quota_b"}, keys: []string{"quota_a", "quota_b"},
			want: []rlsv3.RateLimitResponse_Code{overCode, overCode, overCode}, remaining: []uint32{0, 0}, counts: []uint64{1, 2}},
		// The store counted it before the quota rule denied it: the status
		// is read from that count, and the hit is given back after.
		{name: "every quota over beside a plain limit with room: denied, nothing counted", before: []string{"quota_a"}, keys: []string{"quota_a", "wide"},
			want: []rlsv3.RateLimitResponse_Code{overCode, overCode, okCode}, remaining: []uint32{0, 99}, counts: []uint64{1, 0}},
		{name: "a quota over, another with room: allowed, all counted", before: []string{"quota_a"}, keys: []string{"quota_a", "quota_b", "wide"},
			want: []rlsv3.RateLimitResponse_Code{okCode, overCode, okCode, okCode}, remaining: []uint32{0, 1, 99}, counts: []uint64{2, 1, 1}},
		// Denied: nothing counted, so quota_b still has both.
		{name: "a plain limit over: denied, nothing counted", before: []string{"plain"}, keys: []string{"quota_b", "plain"},
			want: []rlsv3.RateLimitResponse_Code{overCode, okCode, overCode}, remaining: []uint32{2, 0}, counts: []uint64{0, 1}},
		{name: "a plain and a quota over", before: []string{"plain", "quota_a"}, keys: []string{"quota_a", "plain"},
			want: []rlsv3.RateLimitResponse_Code{overCode, overCode, overCode}, remaining: []uint32{0, 0}, counts: []uint64{1, 1}},
	}, func(*Options) {})
}

// TestQuotaRetryAfter: a request denied because its quota descriptors are
// all spent passes again once one of them has room: its retry-after is the
// shortest of their waits. t0 is 15 s into a minute.
func TestQuotaRetryAfter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), modeRules)
	f.call(t, "q", desc("quota_a", "x"))
	f.call(t, "q", desc("quota_h", "x"))
	for _, keys := range [][]string{{"quota_h"}, {"quota_a", "quota_h"}, {"quota_h", "quota_a"}} {
		var ds []*rlv3.RateLimitDescriptor
		for _, k := range keys {
			ds = append(ds, desc(k, "x"))
		}
		resp := f.call(t, "q", ds...)
		want := "45"
		if len(keys) == 1 {
			want = "1965" // the rest of the hour
		}
		var got string
		for _, h := range resp.ResponseHeadersToAdd {
			if h.Key == "retry-after" {
				got = h.Value
			}
		}
		if resp.OverallCode != overCode || got != want {
			t.Errorf("%v: %v, retry-after %q; want OVER_LIMIT, %s", keys, codes1(resp), got, want)
		}
	}
}

// TestGlobalQuotaMode: Options.QuotaMode (QUOTA_MODE) puts every limit in
// quota mode.
func TestGlobalQuotaMode(t *testing.T) {
	t.Parallel()
	runModeCases(t, []modeCase{
		{name: "a limit over, another with room: allowed, both counted", before: []string{"plain"}, keys: []string{"plain", "wide"},
			want: []rlsv3.RateLimitResponse_Code{okCode, overCode, okCode}, remaining: []uint32{0, 99}, counts: []uint64{2, 1}},
		{name: "every limit over: denied, nothing counted", before: []string{"plain", "quota_a"}, keys: []string{"plain", "quota_a"},
			want: []rlsv3.RateLimitResponse_Code{overCode, overCode, overCode}, remaining: []uint32{0, 0}, counts: []uint64{1, 1}},
	}, func(o *Options) { o.QuotaMode = true })
}

// TestGlobalShadowMode: with Options.ShadowMode (SHADOW_MODE) a request
// over any limit is answered OK, without 429 parts, and counted; as in
// envoyproxy/ratelimit the statuses still say which limits are over.
func TestGlobalShadowMode(t *testing.T) {
	t.Parallel()
	runModeCases(t, []modeCase{
		{name: "under", keys: []string{"plain"},
			want: []rlsv3.RateLimitResponse_Code{okCode, okCode}, remaining: []uint32{0}, counts: []uint64{1}},
		{name: "over: OK, counted", before: []string{"plain"}, keys: []string{"plain"},
			want: []rlsv3.RateLimitResponse_Code{okCode, overCode}, remaining: []uint32{0}, counts: []uint64{2}},
		{name: "over beside one under: both counted", before: []string{"plain"}, keys: []string{"plain", "wide"},
			want: []rlsv3.RateLimitResponse_Code{okCode, overCode, okCode}, remaining: []uint32{0, 99}, counts: []uint64{2, 1}},
		// Every quota over denies, and global shadow mode answers OK: counted.
		{name: "quota over: OK, counted", before: []string{"quota_a", "shadowed"}, keys: []string{"quota_a", "shadowed"},
			want: []rlsv3.RateLimitResponse_Code{okCode, overCode, okCode}, remaining: []uint32{0, 0}, counts: []uint64{2, 2}},
	}, func(o *Options) { o.ShadowMode = true })
}

// TestModeOutcomes: what an Observer is told of limits over in each mode.
// A shadow_mode limit, and under global shadow mode every limit but a
// quota-mode one, is shadow_over_limit; a quota-mode limit is over_limit,
// as envoyproxy/ratelimit's over_limit stat counts it, though the request
// is allowed.
func TestModeOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		shadow bool
		keys   []string
		want   []string
	}{
		{"plain", false, []string{"plain"}, []string{"q/plain//near_limit", "q/plain//over_limit"}},
		{"shadow_mode", false, []string{"shadowed"}, []string{"q/shadowed//near_limit", "q/shadowed//shadow_over_limit"}},
		{"quota_mode", false, []string{"quota_a"}, []string{"q/quota_a//near_limit", "q/quota_a//over_limit"}},
		{"global shadow", true, []string{"plain"}, []string{"q/plain//near_limit", "q/plain//shadow_over_limit"}},
		{"global shadow, quota_mode", true, []string{"quota_a"}, []string{"q/quota_a//near_limit", "q/quota_a//over_limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			f := newFixture(t, window.NewMemory(), modeRules, func(o *Options) { o.Observer, o.ShadowMode = rec, tt.shadow })
			for _, k := range tt.keys {
				f.call(t, "q", desc(k, "x"))
				f.call(t, "q", desc(k, "x"))
			}
			if !slices.Equal(rec.decisions, tt.want) {
				t.Errorf("decisions = %q, want %q", rec.decisions, tt.want)
			}
		})
	}
}

// TestGlobalShadowOverridesFailureDeny: global shadow mode answers OK where
// a failure mode would deny, and failure mode error still answers
// Unavailable (it is not a denial: Envoy's failure_mode_deny decides).
func TestGlobalShadowOverridesFailureDeny(t *testing.T) {
	t.Parallel()
	for _, shadow := range []bool{false, true} {
		f := newFixture(t, failingStore{}, modeRules, func(o *Options) { o.ShadowMode = shadow })
		resp := f.call(t, "q", desc("closed", "x"))
		want := overCode
		if shadow {
			want = okCode
		}
		if resp.OverallCode != want || resp.Statuses[0].Code != overCode {
			t.Errorf("shadow %v: codes %v, want %v overall and the status over", shadow, codes1(resp), want)
		}
		if shadow && resp.ResponseHeadersToAdd != nil {
			t.Errorf("shadow: 429 headers %v on OK", resp.ResponseHeadersToAdd)
		}
	}
}
