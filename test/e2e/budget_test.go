//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// budgetTemplate is a route that checks a token budget at request time and
// charges the upstream's reported cost when the stream is done.
var budgetTemplate = template.Must(template.ParseFiles(filepath.Join("testdata", "budget-envoy.yaml.tmpl")))

// TestTokenBudget: with a budget of 1000 tokens and responses that cost 600,
// the second response's charge does not fit and is counted all the same, so
// the third request is refused with 429, and Redis holds the charged 1200.
func TestTokenBudget(t *testing.T) {
	t.Parallel()
	// The budget is per hour: keep the test inside one window.
	if left := window.At(time.Now(), time.Hour).Until(time.Now().UnixMilli()); left < 20*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	var served atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("x-tokens-used", "600")
		io.WriteString(w, "a completion\n")
	}))
	t.Cleanup(app.Close)
	rdb := redistest.Start(t)
	rules, err := filepath.Abs(filepath.Join("testdata", "budget.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, "sidecar-budget", sidecarOptions{Bin: sidecarBin, Rules: rules, RedisURL: rdb.URL(), RedisTimeout: redisTimeout})
	cfg := writeEnvoyTemplate(t, envoyBin, t.TempDir(), budgetTemplate, envoyParams{
		AppPort: port(t, app.Listener.Addr().String()),
		RLSPort: port(t, sc.GRPCAddr),
		Domain:  "budget",
		Timeout: filterTimeout,
	})
	e := startEnvoy(t, envoyBin, "envoy-budget", cfg)
	c := newClient(t)
	redis := rdb.Client(t)
	key := func() string {
		k := window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "e2e", "budget"), "user", "alice"))
		return string(window.AppendWindow(k, window.At(time.Now(), time.Hour)))
	}
	call := func(want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+e.Listener+"/v1/chat/completions", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-user-id", "alice")
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET = %d, want %d (x-ratelimit-remaining %q)", resp.StatusCode, want, resp.Header.Get("x-ratelimit-remaining"))
		}
	}
	// Envoy charges after the response is done, without waiting: poll.
	charged := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := redis.Get(context.Background(), key()).Result()
			n, _ := strconv.Atoi(v)
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s = %q, %v; want %d", key(), v, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	call(http.StatusOK)
	charged(600)
	call(http.StatusOK)
	charged(1200) // past the budget: counted all the same
	call(http.StatusTooManyRequests)
	call(http.StatusTooManyRequests)
	// The refused requests neither reached the upstream nor counted.
	time.Sleep(200 * time.Millisecond)
	charged(1200)
	if n := served.Load(); n != 2 {
		t.Errorf("upstream served %d requests, want 2", n)
	}
}
