package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// mustBatched is NewBatched for a client that is not a cluster's.
func mustBatched(t testing.TB, client scripter, ro Options, o BatchOptions) *Store {
	t.Helper()
	s, err := NewBatched(client, ro, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedisKeysAreReadableWithTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil { // loads the script: no NOSCRIPT round trip below
		t.Fatal(err)
	}
	key := string(window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "ratelimit", "edge"), "api_key", "alice")))
	r := window.Counter{Key: key, Limit: 10, Size: time.Minute, Hits: 3}
	if _, err := s.Take(ctx, storetest.T0, []window.Counter{r}, make([]window.Result, 1)); err != nil {
		t.Fatal(err)
	}
	full := "ratelimit:{edge|api_key=alice}:60000:" + strconv.FormatInt(storetest.T0.UnixMilli(), 10)
	keys, err := client.Keys(ctx, "*alice*").Result()
	if err != nil || len(keys) != 1 || keys[0] != full {
		t.Fatalf("KEYS *alice* = %q, %v, want [%q]", keys, err, full)
	}
	if v, err := client.Get(ctx, full).Result(); err != nil || v != "3" {
		t.Errorf("GET = %q, %v, want 3", v, err)
	}
	ttl1, _ := client.PTTL(ctx, full).Result()
	if ttl1 <= 60*time.Second || ttl1 > 61*time.Second {
		t.Errorf("PTTL = %v, want in (60s, 61s]", ttl1)
	}
	// A later hit must not extend the TTL.
	if err := client.PExpire(ctx, full, 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, storetest.T0, []window.Counter{r}, make([]window.Result, 1)); err != nil {
		t.Fatal(err)
	}
	if ttl2, _ := client.PTTL(ctx, full).Result(); ttl2 > 30*time.Second {
		t.Errorf("PTTL after a second hit = %v, want <= 30s (never extended)", ttl2)
	}
	if got := s.RoundTrips(); got != 2 {
		t.Errorf("RoundTrips = %d after 2 Takes, want 2", got)
	}
}

func TestRedisRecoversFromFlushedScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ok, err := s.Take(ctx, storetest.T0, []window.Counter{storetest.Req("noscript", 1, 1)}, make([]window.Result, 1))
	if err != nil || !ok {
		t.Fatalf("Take after SCRIPT FLUSH = %v, %v, want true, nil", ok, err)
	}
}

func TestRedisDownFailsFast(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Take(ctx, storetest.T0, []window.Counter{storetest.Req("down", 1, 1)}, make([]window.Result, 1))
	if err == nil {
		t.Fatal("Take with Redis down succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Take with Redis down took %v, want about the 50ms deadline", d)
	}
}

// TestExactUnderConcurrency: many goroutines on two stores sharing one Redis
// (two replicas) admit exactly the limit, batched or not, with requests of
// one counter (the script's short form) and of two.
func TestExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		srv := redistest.Start(t)
		stores := []*Store{New(srv.Client(t), Options{}), New(srv.Client(t), Options{})}
		if batched {
			for i := range stores {
				stores[i] = mustBatched(t, srv.Client(t), Options{}, BatchOptions{})
				t.Cleanup(func() { _ = stores[i].Close() })
			}
		}
		const limit, workers, each = 100, 16, 20
		admitted := storetest.AdmitConcurrently(t, workers, each, storetest.Taking(storetest.T0, []window.Counter{storetest.Req("conc", limit, 1), storetest.Req("conc-other", 1000, 1)}, stores...))
		if admitted != limit {
			t.Errorf("batched %v: admitted %d of %d, want exactly %d", batched, admitted, workers*each, limit)
		}
		// The other counter moved only for admitted requests.
		_, res := storetest.Take(t, stores[0], storetest.T0, storetest.Req("conc-other", 1000, 0))
		if res[0].Count != limit {
			t.Errorf("batched %v: other counter = %d, want %d", batched, res[0].Count, limit)
		}
		admitted = storetest.AdmitConcurrently(t, workers, each, storetest.Taking(storetest.T0, []window.Counter{storetest.Req("conc-one", limit, 1)}, stores...))
		if admitted != limit {
			t.Errorf("batched %v, one counter: admitted %d of %d, want exactly %d", batched, admitted, workers*each, limit)
		}
	}
}

// TestRedisDenialLeavesNoTrace: the script counts first and undoes on
// denial, so a denied request must not leave a key it created, nor change
// the value or TTL of one that existed.
func TestRedisDenialLeavesNoTrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	key := func(name string) string {
		return string(window.AppendWindow([]byte("test:{"+name+"}"), window.At(storetest.T0, time.Minute)))
	}
	// A new counter that does not fit: never created.
	if ok, _ := storetest.Take(t, s, storetest.T0, storetest.Req("zero", 0, 1)); ok {
		t.Fatal("limit 0 allowed")
	}
	if n, _ := client.Exists(ctx, key("zero")).Result(); n != 0 {
		t.Errorf("denied request left key %s", key("zero"))
	}
	// An existing counter keeps its value and TTL; a new one denied with it
	// is not created.
	storetest.Take(t, s, storetest.T0, storetest.Req("full", 2, 2))
	if err := client.PExpire(ctx, key("full"), 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := storetest.Take(t, s, storetest.T0, storetest.Req("fresh", 5, 1), storetest.Req("full", 2, 1)); ok {
		t.Fatal("full counter allowed")
	}
	if v, _ := client.Get(ctx, key("full")).Result(); v != "2" {
		t.Errorf("full = %q after a denial, want 2", v)
	}
	if ttl, _ := client.PTTL(ctx, key("full")).Result(); ttl > 30*time.Second || ttl < 29*time.Second {
		t.Errorf("full TTL = %v after a denial, want about 30s (untouched)", ttl)
	}
	if n, _ := client.Exists(ctx, key("fresh")).Result(); n != 0 {
		t.Errorf("denied request left key %s", key("fresh"))
	}
}
