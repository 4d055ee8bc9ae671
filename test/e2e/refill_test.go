//go:build e2e

package e2e

import (
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
	inOneHour() // the budget is per hour
	var unused atomic.Int64
	unused.Store(300)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-tokens-unused", strconv.FormatInt(unused.Load(), 10))
		io.WriteString(w, "a completion\n")
	}))
	t.Cleanup(app.Close)
	b := startBudgetStack(t, "refill", refillTemplate, app)
	for i := 1; i <= 7; i++ {
		b.call(t, "alice", http.StatusOK)
		b.counted(t, "alice", 100*i)
	}
	b.call(t, "alice", http.StatusTooManyRequests) // 700 + 400 does not fit: refused, uncounted
	time.Sleep(200 * time.Millisecond)
	b.counted(t, "alice", 700)

	unused.Store(5000)
	b.call(t, "bob", http.StatusOK) // reserves 400, gives back 5000
	b.counted(t, "bob", 0)
	b.call(t, "bob", http.StatusOK)
	b.counted(t, "bob", 0)

	resp, err := http.Get("http://" + b.sc.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `ratelimit_refunded_hits_total{domain="refill",rule="user"} 12100`; !strings.Contains(string(body), want) {
		t.Errorf("GET /metrics lacks %s", want)
	}
}
