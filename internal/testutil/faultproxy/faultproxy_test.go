package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/faultproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// start starts a proxy to target, closed in t.Cleanup.
func start(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(t.Context(), target)
	if err != nil {
		t.Fatalf("Start(%q) = %v", target, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// client is a go-redis client through p with the sidecar's counting-path
// options: no retries, the context's deadline bounds each call.
func client(t *testing.T, p *faultproxy.Proxy) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 4})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawConn dials p and returns the connection and a reader of its replies.
func rawConn(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("Dial(%s) = %v", p.Addr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// minRoundTrip returns the least of n PING round trips through c.
func minRoundTrip(t *testing.T, c *redis.Client, n int) time.Duration {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		t0 := time.Now()
		err := c.Ping(ctx).Err()
		d := time.Since(t0)
		cancel()
		if err != nil {
			t.Fatalf("PING = %v", err)
		}
		best = min(best, d)
	}
	return best
}

// TestLatency checks that a round trip takes at least twice the latency
// (once each way), and no more than latency plus jitter each way plus a
// generous allowance for a busy machine.
func TestLatency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tests := []struct {
		name  string
		fault faultproxy.Fault
		least time.Duration
		most  time.Duration
	}{
		{"none", faultproxy.Fault{}, 0, 500 * time.Millisecond},
		{"2ms", faultproxy.Fault{Latency: 2 * time.Millisecond}, 4 * time.Millisecond, 500 * time.Millisecond},
		{"10ms", faultproxy.Fault{Latency: 10 * time.Millisecond}, 20 * time.Millisecond, 520 * time.Millisecond},
		{"10ms+jitter", faultproxy.Fault{Latency: 10 * time.Millisecond, Jitter: 5 * time.Millisecond}, 20 * time.Millisecond, 530 * time.Millisecond},
		{"negative is none", faultproxy.Fault{Latency: -time.Second, Jitter: -time.Second}, 0, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, srv.Addr)
			p.Set(tt.fault)
			if got := minRoundTrip(t, client(t, p), 5); got < tt.least || got > tt.most {
				t.Errorf("round trip with %+v = %v, want in [%v, %v]", tt.fault, got, tt.least, tt.most)
			}
		})
	}
}

// TestPipelined checks that latency models a link, not a queue: requests
// sent back to back on one connection all come back after about one round
// trip, not one round trip each.
func TestPipelined(t *testing.T) {
	t.Parallel()
	p := start(t, redistest.Start(t).Addr)
	const latency, n = 50 * time.Millisecond, 20
	p.Set(faultproxy.Fault{Latency: latency})
	conn, r := rawConn(t, p)
	t0 := time.Now()
	for range n {
		if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // separate chunks
	}
	for i := range n {
		if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Fatalf("reply %d = %q, %v, want +PONG", i, line, err)
		}
	}
	// n round trips in sequence would take n*2*latency = 2 s.
	if got, most := time.Since(t0), 2*latency+time.Duration(n)*time.Millisecond+500*time.Millisecond; got > most {
		t.Errorf("%d pipelined PINGs took %v, want at most %v", n, got, most)
	}
}

// TestBandwidth checks the cap with a value large enough that pacing, not
// the round trip, dominates: SET sends it up and GET brings it back, each
// at the cap.
func TestBandwidth(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const size = 64 << 10
	tests := []struct {
		name string
		bw   int64
		// least is the time to move 2*size bytes at bw, less the first
		// piece of each direction, which goes at once.
		least time.Duration
	}{
		{"256KiB/s", 256 << 10, 2 * (size - (256<<10)/100) * time.Second / (256 << 10)},
		{"1MiB/s", 1 << 20, 2 * (size - (1<<20)/100) * time.Second / (1 << 20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, srv.Addr)
			c := client(t, p)
			p.Set(faultproxy.Fault{Bandwidth: tt.bw})
			val := strings.Repeat("x", size)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			t0 := time.Now()
			if err := c.Set(ctx, "k"+tt.name, val, 0).Err(); err != nil {
				t.Fatalf("SET = %v", err)
			}
			got, err := c.Get(ctx, "k"+tt.name).Result()
			d := time.Since(t0)
			if err != nil || got != val {
				t.Fatalf("GET = %d bytes, %v, want %d bytes", len(got), err, size)
			}
			if d < tt.least {
				t.Errorf("SET+GET of %d bytes at %d B/s took %v, want at least %v", size, tt.bw, d, tt.least)
			}
		})
	}
}

// TestBlackhole checks that nothing is forwarded while the blackhole is
// set, on open and on new connections, and that held bytes are delivered
// once it is lifted.
func TestBlackhole(t *testing.T) {
	t.Parallel()
	p := start(t, redistest.Start(t).Addr)
	open, openR := rawConn(t, p)
	ping(t, open, openR) // dialled before the blackhole
	p.Set(faultproxy.Fault{Blackhole: true})

	fresh, freshR := rawConn(t, p) // accepted, never dialled yet
	for name, c := range map[string]struct {
		conn net.Conn
		r    *bufio.Reader
	}{"open": {open, openR}, "new": {fresh, freshR}} {
		if _, err := io.WriteString(c.conn, "PING\r\n"); err != nil {
			t.Fatalf("%s: write = %v", name, err)
		}
		_ = c.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if line, err := c.r.ReadString('\n'); !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
			t.Errorf("%s: read under blackhole = %q, %v, want a timeout", name, line, err)
		}
		_ = c.conn.SetReadDeadline(time.Time{})
	}
	c := client(t, p)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	if err := c.Ping(ctx).Err(); !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Errorf("go-redis PING under blackhole = %v, want a deadline error", err)
	}
	cancel()

	p.Set(faultproxy.Fault{})
	for name, c := range map[string]*bufio.Reader{"open": openR, "new": freshR} {
		if line, err := c.ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Errorf("%s: held PING answered %q, %v, want +PONG", name, line, err)
		}
	}
	if got := minRoundTrip(t, c, 1); got > time.Second {
		t.Errorf("PING after the blackhole took %v", got)
	}
}

// TestResetConnections checks that open connections see a RST and that the
// proxy keeps serving new ones.
func TestResetConnections(t *testing.T) {
	t.Parallel()
	p := start(t, redistest.Start(t).Addr)
	tests := []struct {
		name  string
		fault faultproxy.Fault
	}{
		{"idle", faultproxy.Fault{}},
		{"blackholed before dial", faultproxy.Fault{Blackhole: true}},
		{"bytes in flight", faultproxy.Fault{Latency: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.Set(faultproxy.Fault{})
			waitFor(t, func() bool { return p.Conns() == 0 }) // the last subtest's connection is gone
			conn, r := rawConn(t, p)
			if !tt.fault.Blackhole {
				ping(t, conn, r)
			}
			p.Set(tt.fault)
			if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return p.Conns() == 1 })
			if got := p.ResetConnections(); got != 1 {
				t.Errorf("ResetConnections() = %d, want 1", got)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			// Without a fault the PING's answer may come back before the
			// reset (a busy machine): the reads after it must end in one.
			var err error
			for err == nil {
				_, err = r.ReadString('\n')
			}
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("read after reset = %v, want ECONNRESET", err)
			}
			waitFor(t, func() bool { return p.Conns() == 0 })
			p.Set(faultproxy.Fault{})
			conn2, r2 := rawConn(t, p)
			ping(t, conn2, r2)
		})
	}
}

// TestTargetDown checks that a client of a proxy whose target refuses
// connections sees its connection reset.
func TestTargetDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, ln.Addr().String()) // while ln holds its port, so they differ
	_ = ln.Close()                    // nothing listens there now
	// The reset may arrive before the client's connect completes, as it
	// does on loopback, or after it.
	conn, err := net.Dial("tcp", p.Addr())
	if err == nil {
		defer func() { _ = conn.Close() }()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("connect and read through a proxy to a closed port = %v, want ECONNRESET", err)
	}
}

// TestClose checks that Close returns, with connections held by a
// blackhole and by latency, and that it closes them and the listener.
func TestClose(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault faultproxy.Fault
	}{
		{"idle", faultproxy.Fault{}},
		{"latency", faultproxy.Fault{Latency: time.Hour}},
		{"blackhole", faultproxy.Fault{Blackhole: true}},
		{"bandwidth", faultproxy.Fault{Bandwidth: 1}},
	}
	srv := redistest.Start(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := faultproxy.Start(t.Context(), srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			conn, r := rawConn(t, p)
			ping(t, conn, r)
			p.Set(tt.fault)
			if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
				t.Fatal(err)
			}
			closed := make(chan struct{})
			go func() { _ = p.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not return within 5s")
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			// Idle, the PING may have been answered before Close; then EOF.
			if _, err := io.Copy(io.Discard, r); isTimeout(err) {
				t.Errorf("read after Close = %v, want the connection closed", err)
			}
			if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
				_ = c.Close()
				t.Errorf("Dial after Close succeeded, want refused")
			}
			if err := p.Close(); err != nil {
				t.Errorf("second Close = %v", err)
			}
		})
	}
}

// TestContextEnds checks that the proxy stops when Start's context ends.
func TestContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p, err := faultproxy.Start(ctx, redistest.Start(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	if err := p.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// TestConcurrentSet changes the fault while traffic flows, for the race
// detector, and checks every reply still arrives intact and in order.
func TestConcurrentSet(t *testing.T) {
	t.Parallel()
	p := start(t, redistest.Start(t).Addr)
	c := client(t, p)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		faults := []faultproxy.Fault{{}, {Latency: time.Millisecond, Jitter: time.Millisecond}, {Bandwidth: 1 << 20}, {Blackhole: true}}
		for i := 0; ; i++ {
			select {
			case <-stop:
				p.Set(faultproxy.Fault{})
				return
			case <-time.After(2 * time.Millisecond):
			}
			p.Set(faults[i%len(faults)])
			_ = p.Fault()
			_ = p.Conns()
		}
	}()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				key := "c" + string(rune('a'+g))
				n, err := c.Incr(ctx, key).Result()
				if err != nil || n != int64(i+1) {
					t.Errorf("INCR %s #%d = %d, %v, want %d", key, i+1, n, err, i+1)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
}

func ping(t *testing.T, conn net.Conn, r *bufio.Reader) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		t.Fatalf("write PING = %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v, want +PONG", line, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
