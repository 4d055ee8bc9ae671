package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/racetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
)

// startTimeout bounds how long a sidecar may take to log "serving".
const startTimeout = 10 * time.Second

// goodRules is a rules file whose descriptor k has limit n per hour.
func goodRules(n int) string {
	return "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(n) + "}\n"
}

// badRules has problems on lines 4 and 6.
const badRules = `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: j
    rate_limt: {unit: hour, requests_per_unit: 1}
`

func writeRules(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// logBuffer collects a sidecar's log lines; safe for concurrent use.
type logBuffer struct{ sidecartest.Buffer }

// serving finds the "serving" log line and returns its addresses.
func (b *logBuffer) serving() (grpcAddr, httpAddr string, ok bool) {
	return sidecartest.ServingAddrs(b.String())
}

// count returns how many log lines have msg.
func (b *logBuffer) count(msg string) int {
	return strings.Count(b.String(), `"msg":"`+msg+`"`)
}

// sidecar is run in this process, stopped by cancelling its context.
type sidecar struct {
	grpcAddr, httpAddr string
	log                *logBuffer
	cancel             context.CancelFunc
	done               chan error
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// startSidecar calls run with args and env and waits until it serves. The
// sidecar is stopped, and must return nil, when the test ends.
func startSidecar(t *testing.T, args []string, vars map[string]string) *sidecar {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &sidecar{log: &logBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- run(ctx, args, env(vars), io.Discard, s.log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("run = %v after cancel, want nil; log:\n%s", err, s.log)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("run did not return 15s after cancel; log:\n%s", s.log)
		}
	})
	deadline := time.Now().Add(startTimeout)
	for {
		if g, h, ok := s.log.serving(); ok {
			s.grpcAddr, s.httpAddr = g, h
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err // for Cleanup
			t.Fatalf("run = %v before serving; log:\n%s", err, s.log)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving after %v; log:\n%s", startTimeout, s.log)
		}
	}
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	target := addr
	if !strings.HasPrefix(addr, "unix://") {
		target = "passthrough:///" + addr
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// askK asks for descriptor k=v of domain edge.
func askK(ctx context.Context, c rlsv3.RateLimitServiceClient) (*rlsv3.RateLimitResponse, error) {
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}})
}

var (
	buildOnce sync.Once
	binPath   string
	binErr    error
	binDir    string
)

// binary builds the command once per test process.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "rls-bin")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ratelimit-sidecar")
		out, err := exec.Command("go", racetest.BuildArgs("-o", binPath, ".")...).CombinedOutput()
		if err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build: %v\n%s", binErr, binPath)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
