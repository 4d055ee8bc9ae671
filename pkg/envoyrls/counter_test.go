package envoyrls

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// keyStore records the counters of each Take and allows them all.
type keyStore struct{ got []window.Counter }

func (k *keyStore) Take(_ context.Context, _ time.Time, reqs []window.Counter, _ []window.Result) (bool, error) {
	k.got = append(k.got, reqs...)
	return true, nil
}
func (k *keyStore) Ping(context.Context) error { return nil }

// TestCounterIsShouldRateLimits: Server.Counter gives, for every limit a
// descriptor matches, the counter ShouldRateLimit asks the store for: the
// same key (this project's layout and the reference's), window, algorithm
// and burst, so another protocol charging it counts in the same counter.
func TestCounterIsShouldRateLimits(t *testing.T) {
	t.Parallel()
	const src = `
domain: edge
descriptors:
  - key: three
    rate_limits:
      - {unit: minute, requests_per_unit: 100}
      - {unit: minute, requests_per_unit: 3, algorithm: token_bucket, burst: 2}
      - {unit: hour, requests_per_unit: 100, algorithm: sliding_window}
  - key: user
    value: "bot-*"
    share_threshold: true
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: odd
    value: "a|b=c:{d}%"
    rate_limit: {unit: second, requests_per_unit: 5}
`
	for name, ref := range map[string]*ReferenceKeys{"own keys": nil, "reference keys": {Prefix: "p_"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, d := range [][]string{{"three", "x"}, {"user", "bot-7", "path", "/a"}, {"odd", "a|b=c:{d}%"}} {
				ks := &keyStore{}
				f := newFixture(t, ks, src, func(o *Options) { o.ReferenceKeys = ref })
				f.call(t, "edge", desc(d...))
				limits := f.srv.Rules().Domain("edge").Match(entries(d...))
				if len(ks.got) != len(limits) || len(limits) == 0 {
					t.Fatalf("%v: the store got %d counters for %d limits", d, len(ks.got), len(limits))
				}
				for i, l := range limits {
					got, want := f.srv.Counter("edge", entries(d...), l), ks.got[i]
					want.Hits, want.Jitter, got.Jitter = 0, 0, 0
					if got != want {
						t.Errorf("%v limit %d: Counter = %+v, want %+v", d, i, got, want)
					}
				}
			}
		})
	}
}
