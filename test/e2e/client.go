//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lastIP numbers the client source addresses 127.0.1.x handed out so far.
var lastIP atomic.Uint32

// newIP returns a loopback address no other client of this test binary has
// used. Envoy's remote_address descriptor is the client's address, so each
// client gets counters of its own.
func newIP(t *testing.T) string {
	n := lastIP.Add(1)
	if n > 254 {
		t.Fatal("out of 127.0.1.x client addresses")
	}
	return fmt.Sprintf("127.0.1.%d", n)
}

// client sends requests from its own loopback source address.
type client struct {
	IP string
	hc *http.Client
}

func newClient(t *testing.T) *client {
	ip := newIP(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 4,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{IP: ip, hc: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// get sends GET path through e, with x-api-key when apiKey is not empty,
// records the outcome in e's ledger and returns the response.
func (c *client) get(t *testing.T, e *envoy, path, apiKey string) *result {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+e.Listener+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("x-api-key", apiKey)
	}
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s via %s from %s: %v", path, e.Name, c.IP, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s via %s: body: %v", path, e.Name, err)
	}
	r := &result{Envoy: e.Name, Status: resp.StatusCode, Header: resp.Header, Body: body, Took: time.Since(start)}
	e.record(r)
	return r
}

// upstream is the app behind both Envoys. It counts the requests it
// receives by path.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func startUpstream(t *testing.T) *upstream {
	u := &upstream{hits: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits[r.URL.Path]++
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello from upstream\n")
	}))
	t.Cleanup(u.Close)
	return u
}

// count returns how many requests for path the upstream received.
func (u *upstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits[path]
}
