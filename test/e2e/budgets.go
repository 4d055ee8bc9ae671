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

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// inOneHour waits, when the hour ends within 20 s, until the next one
// starts, so that a test of hourly budgets runs inside one window.
func inOneHour() {
	if left := window.At(time.Now(), time.Hour).Until(time.Now().UnixMilli()); left < 20*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// The budget stacks' Redis and filter timeouts: generous, see startBudgetStack.
const (
	budgetRedisTimeout  = time.Second
	budgetFilterTimeout = "2s"
)

// budgetStack is a token-budget route: Envoy from a template whose rate
// limits take the x-user-id header as descriptor "user", a sidecar with
// the rules of testdata/<domain>.yaml on a redis-server of its own, and
// upstream app.
type budgetStack struct {
	domain string
	e      *envoy
	sc     *sidecar
	c      *client
	redis  *redis.Client
}

func startBudgetStack(t *testing.T, domain string, tmpl *template.Template, app *httptest.Server) *budgetStack {
	t.Helper()
	rdb := redistest.Start(t)
	rules, err := filepath.Abs(filepath.Join("testdata", domain+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// These tests are about what is counted, not about time: a loaded
	// machine must not turn a slow Redis call into a failure-mode answer
	// (the templates set failure_mode_deny, so any error is a 500).
	sc := startSidecar(t, "sidecar-"+domain, sidecarOptions{Bin: sidecarBin, Rules: rules, RedisURL: rdb.URL(), RedisTimeout: budgetRedisTimeout})
	cfg := writeEnvoyTemplate(t, envoyBin, t.TempDir(), tmpl, envoyParams{
		AppPort: port(t, app.Listener.Addr().String()),
		RLSPort: port(t, sc.GRPCAddr),
		Domain:  domain,
		Timeout: budgetFilterTimeout,
	})
	return &budgetStack{domain: domain, e: startEnvoy(t, envoyBin, "envoy-"+domain, cfg), sc: sc, c: newClient(t), redis: rdb.Client(t)}
}

// call sends GET /v1/chat/completions as user and checks its status.
func (b *budgetStack) call(t *testing.T, user string, want int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+b.e.Listener+"/v1/chat/completions", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-user-id", user)
	resp, err := b.c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("GET as %s = %d, want %d (x-ratelimit-remaining %q)", user, resp.StatusCode, want, resp.Header.Get("x-ratelimit-remaining"))
	}
}

// key is the key of the hourly counter now of the descriptor of entries
// (key, value pairs); the sidecar's prefix is e2e.
func (b *budgetStack) key(entries ...string) string {
	k := window.AppendKeyHead(nil, "e2e", b.domain)
	for i := 0; i+1 < len(entries); i += 2 {
		k = window.AppendKeyEntry(k, entries[i], entries[i+1])
	}
	return string(window.AppendWindow(window.AppendKeyEnd(k), window.At(time.Now(), time.Hour)))
}

// counted waits until user's counter (descriptor user=<user>) holds want.
func (b *budgetStack) counted(t *testing.T, user string, want int) {
	t.Helper()
	b.holds(t, b.key("user", user), want)
}

// holds waits until the counter at key holds want. Envoy reports at stream
// end after the response, without waiting: poll.
func (b *budgetStack) holds(t *testing.T, key string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := b.redis.Get(context.Background(), key).Result()
		n, _ := strconv.Atoi(v)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %q, %v; want %d", key, v, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// costApp starts an upstream that reports cost tokens used in
// x-tokens-used (the header the routes' stream-done hits_addend reads) and
// counts the requests it served.
func costApp(t *testing.T, cost string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var served atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("x-tokens-used", cost)
		io.WriteString(w, "a completion\n")
	}))
	t.Cleanup(app.Close)
	return app, &served
}
