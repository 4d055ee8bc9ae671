//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

var refillTemplate = template.Must(template.ParseFiles(filepath.Join("testdata", "refill-envoy.yaml.tmpl")))

// TestNegativeHitsRefill: a real Envoy sends is_negative_hits. Each
// request reserves 400 of a 1000-token budget and gives back, when its
// stream is done, the 300 its upstream reports unused. With the refills
// seven requests fit (100 each), and the eighth reservation, 700 + 400, is
// refused: without them only two would. A refill larger than the counter
// floors it at 0, and the refunds show in ratelimit_refunded_hits_total.
func TestNegativeHitsRefill(t *testing.T) {
	t.Parallel()
	// The budget is per hour: keep the test inside one window.
	if left := window.At(time.Now(), time.Hour).Until(time.Now().UnixMilli()); left < 20*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	var unused atomic.Int64
	unused.Store(300)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-tokens-unused", strconv.FormatInt(unused.Load(), 10))
		io.WriteString(w, "a completion\n")
	}))
	t.Cleanup(app.Close)
	rdb := redistest.Start(t)
	rules, err := filepath.Abs(filepath.Join("testdata", "refill.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, "sidecar-refill", sidecarOptions{Bin: sidecarBin, Rules: rules, RedisURL: rdb.URL(), RedisTimeout: redisTimeout})
	cfg := writeEnvoyTemplate(t, envoyBin, t.TempDir(), refillTemplate, envoyParams{
		AppPort: port(t, app.Listener.Addr().String()),
		RLSPort: port(t, sc.GRPCAddr),
		Domain:  "refill",
		Timeout: filterTimeout,
	})
	e := startEnvoy(t, envoyBin, "envoy-refill", cfg)
	c := newClient(t)
	redis := rdb.Client(t)
	key := func(user string) string {
		k := window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "e2e", "refill"), "user", user))
		return string(window.AppendWindow(k, window.At(time.Now(), time.Hour)))
	}
	call := func(user string, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+e.Listener+"/v1/chat/completions", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-user-id", user)
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET as %s = %d, want %d (x-ratelimit-remaining %q)", user, resp.StatusCode, want, resp.Header.Get("x-ratelimit-remaining"))
		}
	}
	// Envoy sends the refill after the response is done, without waiting: poll.
	counted := func(user string, want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := redis.Get(context.Background(), key(user)).Result()
			n, _ := strconv.Atoi(v)
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s = %q, %v; want %d", key(user), v, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := 1; i <= 7; i++ {
		call("alice", http.StatusOK)
		counted("alice", 100*i)
	}
	call("alice", http.StatusTooManyRequests) // 700 + 400 does not fit: refused, uncounted
	time.Sleep(200 * time.Millisecond)
	counted("alice", 700)

	unused.Store(5000)
	call("bob", http.StatusOK) // reserves 400, gives back 5000
	counted("bob", 0)
	call("bob", http.StatusOK)
	counted("bob", 0)

	resp, err := http.Get("http://" + sc.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `ratelimit_refunded_hits_total{domain="refill",rule="user"} 12100`; !strings.Contains(string(body), want) {
		t.Errorf("GET /metrics lacks %s", want)
	}
}
