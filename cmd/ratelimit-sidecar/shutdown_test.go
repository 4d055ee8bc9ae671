package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// process is the built binary running as a child.
type process struct {
	*proctest.Process
	log                *logBuffer
	grpcAddr, httpAddr string
}

// startProcess runs the binary with args and waits until it serves. It is
// killed at the end of the test if still running.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{log: &logBuffer{}}
	var err error
	p.Process, err = proctest.Start(proctest.Options{Path: binary(t), Args: args, Env: []string{}, Stdout: io.Discard, Stderr: p.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	deadline := time.After(startTimeout)
	for {
		if g, h, ok := p.log.serving(); ok {
			p.grpcAddr, p.httpAddr = g, h
			return p
		}
		select {
		case <-p.Done():
			t.Fatalf("exited (%v) before serving; log:\n%s", p.Wait(), p.log)
		case <-deadline:
			t.Fatalf("not serving after %v; log:\n%s", startTimeout, p.log)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// watchHealth opens a Watch stream and returns its statuses as they come.
func watchHealth(t *testing.T, ctx context.Context, c healthpb.HealthClient) <-chan healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan healthpb.HealthCheckResponse_ServingStatus, 16)
	go func() {
		defer close(ch)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- resp.Status
		}
	}()
	return ch
}

// waitStatus reads statuses until want, or fails after d.
func waitStatus(t *testing.T, ch <-chan healthpb.HealthCheckResponse_ServingStatus, want healthpb.HealthCheckResponse_ServingStatus, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("health Watch ended before %v", want)
			}
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("health Watch: no %v within %v", want, d)
		}
	}
}

// callRecord is one ShouldRateLimit call of the load.
type callRecord struct {
	start, end time.Time
	err        error
}

// underLoad connects to a started process, waits until its health says
// SERVING, starts 8 callers and waits until they have had 80 answers; it
// returns the health stream and the load.
func underLoad(t *testing.T, p *process) (health <-chan healthpb.HealthCheckResponse_ServingStatus, l *load) {
	t.Helper()
	conn := dial(t, p.grpcAddr)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	health = watchHealth(t, ctx, healthpb.NewHealthClient(conn))
	waitStatus(t, health, healthpb.HealthCheckResponse_SERVING, 5*time.Second)
	l = hammer(rlsv3.NewRateLimitServiceClient(conn), 8)
	t.Cleanup(func() { l.finish() })
	for deadline := time.Now().Add(5 * time.Second); l.answered.Load() < 80; {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls answered 5s into the load, want 80; log:\n%s", l.answered.Load(), p.log)
		}
		time.Sleep(time.Millisecond)
	}
	return health, l
}

// load is callers of ShouldRateLimit, running until finish.
type load struct {
	answered atomic.Int64 // calls that returned without an error
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	records  []callRecord
}

// hammer calls ShouldRateLimit from n goroutines until the load's finish.
func hammer(c rlsv3.RateLimitServiceClient, n int) *load {
	l := &load{stop: make(chan struct{})}
	for range n {
		l.wg.Go(func() {
			var mine []callRecord
			defer func() { l.mu.Lock(); l.records = append(l.records, mine...); l.mu.Unlock() }()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r := callRecord{start: time.Now()}
				_, r.err = askK(ctx, c)
				r.end = time.Now()
				cancel()
				if r.err == nil {
					l.answered.Add(1)
				}
				mine = append(mine, r)
			}
		})
	}
	return l
}

// finish stops the callers and returns their records.
func (l *load) finish() []callRecord {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.records
}

// TestShutdownUnderLoad signals a real process while several goroutines
// call it: health turns NOT_SERVING at once, the process exits 0 well
// within -shutdown-timeout, and the only errors are Unavailable, for calls
// made after SIGTERM or within 50 ms before it (see the margin below; that
// in-flight calls drain is TestShutdownDrainsRedisCalls's to show).
func TestShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	p := startProcess(t, "-config", writeRules(t, goodRules(1_000_000_000)),
		"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-shutdown-timeout", "10s")
	health, l := underLoad(t, p)

	sig := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, health, healthpb.HealthCheckResponse_NOT_SERVING, time.Second)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second): // half the shutdown timeout: a Watch stream must not hold it
		t.Fatalf("still running 5s after SIGTERM; log:\n%s", p.log)
	}
	records := l.finish()
	if err := p.Wait(); err != nil {
		t.Errorf("exit: %v, want status 0; log:\n%s", err, p.log)
	}
	// A call the client started a moment before the signal may not have
	// reached the server when GracefulStop's GOAWAY did; gRPC then retries
	// it on a new connection, which is refused. Such a call was never in
	// flight. How long "a moment" is depends on scheduling: under -race on
	// two shared cores, a client goroutine can wait milliseconds between
	// taking its start time and writing its headers, so the margin is wide.
	// The calls here take microseconds, so any margin excuses the calls in
	// flight at the signal; what it can catch is a call held longer than
	// the margin and then failed. TestShutdownDrainsRedisCalls holds calls
	// at the server, where that is certain.
	checkCalls(t, records, sig, 50*time.Millisecond)
	for _, msg := range []string{"shutting down: draining in-flight calls", "stopped"} {
		if p.log.count(msg) != 1 {
			t.Errorf("log has %d %q lines, want 1:\n%s", p.log.count(msg), msg, p.log)
		}
	}
}

// checkCalls fails for any error but Unavailable, and for any error of a
// call started before sig - margin, which was in flight when SIGTERM came.
// It wants at least one call answered before sig.
func checkCalls(t *testing.T, records []callRecord, sig time.Time, margin time.Duration) (inFlight int) {
	t.Helper()
	ok := 0
	for _, r := range records {
		if r.err == nil {
			ok++
			if r.start.Before(sig) && r.end.After(sig) {
				inFlight++
			}
			continue
		}
		if status.Code(r.err) != codes.Unavailable {
			t.Errorf("call at sig%+v: %v, want OK or Unavailable", r.start.Sub(sig), r.err)
		} else if r.start.Before(sig.Add(-margin)) {
			t.Errorf("call at sig%+v, in flight at SIGTERM: %v, want OK", r.start.Sub(sig), r.err)
		}
	}
	if ok == 0 {
		t.Errorf("%d calls, none OK", len(records))
	}
	t.Logf("%d calls, %d OK, %d in flight at SIGTERM and OK", len(records), ok, inFlight)
	return inFlight
}

// TestShutdownDrainsRedisCalls holds calls in flight by pausing a real
// Redis (DEBUG SLEEP), signals the process, and checks that health went
// NOT_SERVING while they were held, that every one of them succeeded, and
// that the process exited 0.
func TestShutdownDrainsRedisCalls(t *testing.T) {
	t.Parallel()
	rds := redistest.StartWith(t, redistest.Options{Args: []string{"--enable-debug-command", "yes"}})
	p := startProcess(t, "-config", writeRules(t, goodRules(1_000_000_000)),
		"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-redis-url", rds.URL(), "-redis-timeout", "5s", "-health-interval", "1m", "-shutdown-timeout", "10s")
	health, l := underLoad(t, p)

	// Redis sleeps 1s. Once a PING goes unanswered for 100ms it is asleep,
	// and every call in flight then is held inside ShouldRateLimit until
	// after SIGTERM.
	probe := rds.BoundedClient(t)
	if err := probe.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	slept := make(chan error, 1)
	go func() { slept <- rds.Client(t).Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
	var asleep time.Time
	for deadline := time.Now().Add(5 * time.Second); asleep.IsZero(); {
		if time.Now().After(deadline) {
			t.Fatal("Redis still answers PING 5s after DEBUG SLEEP 1")
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if probe.Ping(ctx).Err() != nil {
			asleep = start
		}
		cancel()
	}
	sig := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, health, healthpb.HealthCheckResponse_NOT_SERVING, 500*time.Millisecond) // while calls are held
	select {
	case <-p.Done():
	case <-time.After(8 * time.Second):
		t.Fatalf("still running 8s after SIGTERM; log:\n%s", p.log)
	}
	if err := <-slept; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	records := l.finish()
	if err := p.Wait(); err != nil {
		t.Errorf("exit: %v, want status 0; log:\n%s", err, p.log)
	}
	// Calls in flight when the probe found Redis asleep were blocked there.
	if n := checkCalls(t, records, sig, sig.Sub(asleep)); n == 0 {
		t.Errorf("no call was in flight at SIGTERM; the test did not hold any")
	}
	if strings.Contains(p.log.String(), "shutdown timeout") {
		t.Errorf("shutdown hit its timeout:\n%s", p.log)
	}
}

// TestSIGHUPReloads sends SIGHUP with the rules unchanged: they load again
// (a new "rules loaded"), and the process keeps serving; then after a bad
// edit: the error shows in /rules, and the process lives. -config is a
// directory whose edge.yaml is a symlink to a file in another directory.
// The watcher sees the directory's entries, not the file behind a link, so
// the edit is loaded by SIGHUP alone.
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	target := writeRules(t, goodRules(5))
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-log-level", "debug")
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); p.log.count("rules loaded") < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no second \"rules loaded\" 2s after SIGHUP; log:\n%s", p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A bad file and SIGHUP: the error shows in /rules, the process lives.
	if err := os.WriteFile(target, []byte(badRules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; {
		_, body := httpGet(t, "http://"+p.httpAddr+"/rules")
		if strings.Contains(body, path+":4:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /rules lacks the error 2s after a bad file and SIGHUP:\n%s\nlog:\n%s", body, p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The process logs before it reloads, but the test reads its stderr
	// through a pipe and a goroutine, which may lag behind /rules.
	for deadline := time.Now().Add(2 * time.Second); p.log.count("SIGHUP: reloading rules") < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.log.count("SIGHUP: reloading rules"); n != 2 {
		t.Errorf("%d \"SIGHUP: reloading rules\" lines, want 2; log:\n%s", n, p.log)
	}
	if n := p.log.count("rules changed"); n != 0 {
		t.Errorf("the watcher saw %d changes, want 0 (the edit must reach the process by SIGHUP only); log:\n%s", n, p.log)
	}
	select {
	case <-p.Done():
		t.Fatalf("exited after SIGHUP: %v", p.Wait())
	default:
	}
}
