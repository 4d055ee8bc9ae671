package xds

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// within bounds how long a push may take to reach the rules.
const within = 5 * time.Second

// applied holds the rules a Client applied last.
type applied struct {
	mu  sync.Mutex
	set *rules.Set
	n   int
}

func (a *applied) apply(s *rules.Set) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.set, a.n = s, a.n+1
}

func (a *applied) get() (*rules.Set, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.set, a.n
}

// limitOf returns the requests_per_unit that the applied rules give user
// on Envoy Gateway's route of domain, or -1 when nothing matches.
func (a *applied) limitOf(domain, user string) int {
	set, _ := a.get()
	d := set.Domain(domain)
	if d == nil {
		return -1
	}
	var es []*rlv3.RateLimitDescriptor_Entry
	for _, e := range xdstest.EnvoyGatewayEntries(user) {
		es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	ls := d.Match(es)
	if len(ls) != 1 {
		return -1
	}
	return int(ls[0].RequestsPerUnit)
}

// waitLimit waits until the applied rules give user want on domain.
func (a *applied) waitLimit(t *testing.T, domain, user string, want int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for a.limitOf(domain, user) != want {
		if time.Now().After(deadline) {
			t.Fatalf("limit of %s in %s = %d after %v, want %d", user, domain, a.limitOf(domain, user), within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startClient runs a Client of srv until the test ends.
func startClient(t *testing.T, srv *xdstest.Server, o Options) (*Client, *applied) {
	t.Helper()
	a := &applied{}
	o.ServerURL = srv.Addr
	if o.NodeID == "" {
		o.NodeID = "envoy-ratelimit"
	}
	o.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	o.Apply = a.apply
	o.Logger = zaptest.NewLogger(t)
	if o.Backoff.Initial == 0 {
		o.Backoff = Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: true}
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	return c, a
}

// badConfig is Envoy Gateway's config with a limit that has no unit.
func badConfig(listener string) *rlsconfv3.RateLimitConfig {
	return xdstest.EnvoyGatewayConfig(listener, 5, rlsconfv3.RateLimitUnit_UNKNOWN)
}

func TestClientPushes(t *testing.T) {
	t.Parallel()
	srv := xdstest.Start(t, "envoy-ratelimit")
	var updates, failures atomic.Int32
	c, a := startClient(t, srv, Options{
		Headers: map[string]string{"x-tenant": "t1"},
		OnUpdate: func(err error) {
			updates.Add(1)
			if err != nil {
				failures.Add(1)
			}
		},
	})
	v1 := srv.Push(xdstest.EnvoyGatewayConfig("default/eg/http", 5, rlsconfv3.RateLimitUnit_MINUTE))
	a.waitLimit(t, "default/eg/http", "alice", 5)
	srv.WaitAck(v1, within)

	// A second listener's domain comes and the first one's limit changes.
	v2 := srv.Push(xdstest.EnvoyGatewayConfig("default/eg/http", 7, rlsconfv3.RateLimitUnit_HOUR),
		xdstest.EnvoyGatewayConfig("default/eg/https", 3, rlsconfv3.RateLimitUnit_YEAR))
	a.waitLimit(t, "default/eg/http", "alice", 7)
	a.waitLimit(t, "default/eg/https", "alice", 3)
	srv.WaitAck(v2, within)
	st := c.Status()
	if st.Version != v2 || !st.Connected || len(st.Resources) != 2 || st.LastNack != nil {
		t.Errorf("Status = %+v, want version %s, connected, 2 resources, no NACK", st, v2)
	}
	set, _ := a.get()
	if got := set.Files(); len(got) != 2 || got[0] != "xds:default/eg/http" {
		t.Errorf("Files = %q, want the resources as xds:<name>", got)
	}

	// A bad push: one resource of two has a limit without a unit.
	_, before := a.get()
	v3 := srv.Push(xdstest.EnvoyGatewayConfig("default/eg/http", 9, rlsconfv3.RateLimitUnit_MINUTE), badConfig("default/eg/https"))
	msg := srv.WaitNack(v3, within)
	if !strings.Contains(msg, "xds:default/eg/https: descriptors[0].descriptors[0].rate_limit.unit: missing") {
		t.Errorf("NACK error_detail = %q, want the problem with resource and field", msg)
	}
	if _, n := a.get(); n != before {
		t.Errorf("Apply called %d times after a bad push, want none", n-before)
	}
	if got := a.limitOf("default/eg/http", "alice"); got != 7 {
		t.Errorf("after a bad push: limit %d, want the last good 7", got)
	}
	st = c.Status()
	if st.Version != v2 || st.LastNack == nil || st.LastNack.Version != v3 {
		t.Errorf("Status = %+v, want version %s serving and a NACK of %s", st, v2, v3)
	}
	if rs := c.RulesStatus(); rs["last_reload_error"] == (*Nack)(nil) {
		t.Errorf("RulesStatus = %v, want the NACK as last_reload_error", rs)
	}

	// A good push after it is applied.
	v4 := srv.Push(xdstest.EnvoyGatewayConfig("default/eg/http", 11, rlsconfv3.RateLimitUnit_MINUTE))
	a.waitLimit(t, "default/eg/http", "alice", 11)
	srv.WaitAck(v4, within)
	if a.limitOf("default/eg/https", "alice") != -1 {
		t.Error("a domain no longer pushed is still served")
	}
	if c.Status().LastNack != nil {
		t.Error("LastNack stays after a good push")
	}
	if got := updates.Load(); got < 4 || failures.Load() != 1 {
		t.Errorf("OnUpdate: %d calls, %d failures, want >= 4 and 1", got, failures.Load())
	}
	if h := srv.Header("x-tenant"); len(h) == 0 || h[0] != "t1" {
		t.Errorf("stream header x-tenant = %q, want t1", h)
	}
	if n := srv.Nodes(); len(n) == 0 || n[0] != "envoy-ratelimit" {
		t.Errorf("node ids = %q, want envoy-ratelimit", n)
	}
}

// TestClientFirstPushBad: a bad first push applies nothing.
func TestClientFirstPushBad(t *testing.T) {
	t.Parallel()
	srv := xdstest.Start(t, "n")
	_, a := startClient(t, srv, Options{NodeID: "n"})
	v := srv.Push(badConfig("l"))
	srv.WaitNack(v, within)
	if set, n := a.get(); n != 0 || set != nil {
		t.Fatalf("Apply called %d times, want none", n)
	}
	srv.Push(xdstest.EnvoyGatewayConfig("l", 2, rlsconfv3.RateLimitUnit_SECOND))
	a.waitLimit(t, "l", "u", 2)
}

// TestClientServerRestarts: the server stops (the rules keep serving)
// and starts again on the same port with versions from 1; its next push
// is applied.
func TestClientServerRestarts(t *testing.T) {
	t.Parallel()
	srv := xdstest.Start(t, "envoy-ratelimit")
	c, a := startClient(t, srv, Options{})
	srv.WaitAck(srv.Push(xdstest.EnvoyGatewayConfig("l", 5, rlsconfv3.RateLimitUnit_MINUTE)), within)
	a.waitLimit(t, "l", "u", 5)

	srv.Stop()
	deadline := time.Now().Add(within)
	for c.Status().Connected {
		if time.Now().After(deadline) {
			t.Fatal("still connected to a stopped server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Rules keep serving through failed reconnections, not only until the
	// first one.
	for c.Status().EndedStreams < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("ended streams = %d, want a few failed reconnections", c.Status().EndedStreams)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := a.limitOf("l", "u"); got != 5 {
		t.Fatalf("while the server is down: limit %d, want 5", got)
	}
	if c.Status().LastStreamError == "" {
		t.Error("LastStreamError empty after the server stopped")
	}

	srv2 := xdstest.StartAt(t, srv.Addr, "envoy-ratelimit")
	// The same content again changes nothing; then a new limit lands.
	srv2.WaitAck(srv2.Push(xdstest.EnvoyGatewayConfig("l", 5, rlsconfv3.RateLimitUnit_MINUTE)), within)
	if got := a.limitOf("l", "u"); got != 5 {
		t.Fatalf("after the restart: limit %d, want 5", got)
	}
	v := srv2.Push(xdstest.EnvoyGatewayConfig("l", 6, rlsconfv3.RateLimitUnit_MINUTE))
	a.waitLimit(t, "l", "u", 6)
	srv2.WaitAck(v, within)
}

// TestClientDefaults: per-domain defaults fill what the proto lacks.
func TestClientDefaults(t *testing.T) {
	t.Parallel()
	d, err := ParseDefaults("defaults.yaml", []byte(`
domains:
  "*":
    failure_mode: allow
  l:
    algorithm: sliding_window
    rules:
      httproute/default/route/rule/0_httproute/default/route/rule/0.rule-0-match-0:
        unit_multiplier: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	srv := xdstest.Start(t, "envoy-ratelimit")
	_, a := startClient(t, srv, Options{Defaults: d})
	srv.Push(xdstest.EnvoyGatewayConfig("l", 5, rlsconfv3.RateLimitUnit_MINUTE), xdstest.EnvoyGatewayConfig("m", 5, rlsconfv3.RateLimitUnit_MINUTE))
	a.waitLimit(t, "l", "u", 5)
	set, _ := a.get()
	l, m := set.Domain("l"), set.Domain("m")
	if l.FailureMode != rules.FailAllow || m.FailureMode != rules.FailAllow {
		t.Errorf("failure modes %v, %v, want allow from \"*\"", l.FailureMode, m.FailureMode)
	}
	if l.Algorithm == m.Algorithm {
		t.Errorf("algorithm of l = %v, same as m's: want sliding_window", l.Algorithm)
	}
	es := []*rlv3.RateLimitDescriptor_Entry{}
	for _, e := range xdstest.EnvoyGatewayEntries("u") {
		es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	if lim := l.Match(es)[0]; lim.Multiplier != 3 || lim.Size != 3*time.Minute {
		t.Errorf("l's limit: multiplier %d size %v, want 3 and 3m", lim.Multiplier, lim.Size)
	}
	if lim := m.Match(es)[0]; lim.Multiplier != 1 {
		t.Errorf("m's limit: multiplier %d, want 1", lim.Multiplier)
	}
}

func TestNewRequires(t *testing.T) {
	t.Parallel()
	creds := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	apply := func(*rules.Set) {}
	for _, o := range []Options{
		{DialOptions: creds, Apply: apply},
		{ServerURL: "x:1", Apply: apply},
		{ServerURL: "x:1", DialOptions: creds},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}
