package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// process is the built binary running as a child.
type process struct {
	cmd                *exec.Cmd
	log                *logBuffer
	grpcAddr, httpAddr string
	exited             chan struct{}
	err                error // Wait's, once exited is closed
}

// startProcess runs the binary with args and waits until it serves. It is
// killed at the end of the test if still running.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary(t), args...), log: &logBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = []string{}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.log.Write(append(sc.Bytes(), '\n'))
		}
		io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	deadline := time.After(startTimeout)
	for {
		if g, h, ok := p.log.serving(); ok {
			p.grpcAddr, p.httpAddr = g, h
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("exited (%v) before serving; log:\n%s", p.err, p.log)
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
// SERVING, and starts 8 callers; it returns the health stream, the channel
// that stops the callers, and the function that waits for their records.
func underLoad(t *testing.T, p *process) (health <-chan healthpb.HealthCheckResponse_ServingStatus, stop chan struct{}, wait func() []callRecord) {
	t.Helper()
	conn := dial(t, p.grpcAddr)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	health = watchHealth(t, ctx, healthpb.NewHealthClient(conn))
	waitStatus(t, health, healthpb.HealthCheckResponse_SERVING, 5*time.Second)
	stop = make(chan struct{})
	return health, stop, hammer(rlsv3.NewRateLimitServiceClient(conn), 8, stop)
}

// hammer calls ShouldRateLimit from n goroutines until stop is closed.
func hammer(c rlsv3.RateLimitServiceClient, n int, stop <-chan struct{}) func() []callRecord {
	var mu sync.Mutex
	var records []callRecord
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var mine []callRecord
			defer func() { mu.Lock(); records = append(records, mine...); mu.Unlock() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r := callRecord{start: time.Now()}
				_, r.err = askK(ctx, c)
				r.end = time.Now()
				cancel()
				mine = append(mine, r)
			}
		})
	}
	return func() []callRecord { wg.Wait(); return records }
}

// TestShutdownUnderLoad signals a real process while several goroutines
// call it: health turns NOT_SERVING at once, the process exits 0 well
// within -shutdown-timeout, and the only errors are Unavailable, for calls
// made after SIGTERM.
func TestShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	p := startProcess(t, "-config", writeRules(t, goodRules(1_000_000_000)),
		"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-shutdown-timeout", "10s")
	health, stop, wait := underLoad(t, p)
	time.Sleep(200 * time.Millisecond) // load builds up

	sig := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, health, healthpb.HealthCheckResponse_NOT_SERVING, time.Second)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second): // half the shutdown timeout: a Watch stream must not hold it
		t.Fatalf("still running 5s after SIGTERM; log:\n%s", p.log)
	}
	close(stop)
	records := wait()
	if p.err != nil {
		t.Errorf("exit: %v, want status 0; log:\n%s", p.err, p.log)
	}
	// A call the client started a moment before the signal may not have
	// reached the server when GracefulStop's GOAWAY did; gRPC then retries
	// it on a new connection, which is refused. Such a call was never in
	// flight. TestShutdownDrainsRedisCalls holds calls at the server, where
	// it is certain.
	checkCalls(t, records, sig, 2*time.Millisecond)
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
	health, stop, wait := underLoad(t, p)
	time.Sleep(100 * time.Millisecond)

	// Redis sleeps 1s: every caller is now blocked inside ShouldRateLimit.
	slept := make(chan error, 1)
	go func() { slept <- rds.Client(t).Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
	time.Sleep(200 * time.Millisecond)
	sig := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, health, healthpb.HealthCheckResponse_NOT_SERVING, 500*time.Millisecond) // while calls are held
	select {
	case <-p.exited:
	case <-time.After(8 * time.Second):
		t.Fatalf("still running 8s after SIGTERM; log:\n%s", p.log)
	}
	if err := <-slept; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	close(stop)
	records := wait()
	if p.err != nil {
		t.Errorf("exit: %v, want status 0; log:\n%s", p.err, p.log)
	}
	// Calls started more than 150ms before SIGTERM were blocked in Redis.
	if n := checkCalls(t, records, sig, 150*time.Millisecond); n == 0 {
		t.Errorf("no call was in flight at SIGTERM; the test did not hold any")
	}
	if strings.Contains(p.log.String(), "shutdown timeout") {
		t.Errorf("shutdown hit its timeout:\n%s", p.log)
	}
}

// TestSIGHUPReloads edits nothing and sends SIGHUP: the rules load again
// (a new last_reload), and the process keeps serving.
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	path := writeRules(t, goodRules(5))
	p := startProcess(t, "-config", path, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); p.log.count("rules loaded") < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no second \"rules loaded\" 2s after SIGHUP; log:\n%s", p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A bad file and SIGHUP: the error shows in /rules, the process lives.
	if err := os.WriteFile(path, []byte(badRules), 0o644); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(2 * time.Second); ; {
		_, body := httpGet(t, "http://"+p.httpAddr+"/rules")
		if strings.Contains(body, path+":4:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /rules lacks the error 2s after a bad file and SIGHUP:\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatalf("exited after SIGHUP: %v", p.err)
	default:
	}
}
