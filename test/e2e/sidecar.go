//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
)

// startTimeout bounds how long a process may take to start serving.
const startTimeout = 15 * time.Second

// sidecar is one ratelimit-sidecar process listening on loopback ports the
// kernel picked (it logs them in its "serving" line).
type sidecar struct {
	*proc
	GRPCAddr string // host:port of the rate limit service
	HTTPAddr string // host:port of /readyz

	killed atomic.Bool // by kill: its exit status is not checked
}

// kill kills the sidecar with SIGKILL, as a node failure would, and waits
// until it has exited.
func (s *sidecar) kill() {
	s.killed.Store(true)
	s.Kill()
}

// sidecarOptions configure startSidecar.
type sidecarOptions struct {
	Bin      string // the ratelimit-sidecar binary
	Rules    string // -config
	RedisURL string // -redis-url; "" for the in-memory store
	// RedisTimeout is -redis-timeout: the bound of a Redis call whose
	// request has no deadline. Envoy always sends its filter timeout as one,
	// and a call then waits until it, less a margin for answering.
	RedisTimeout time.Duration
	Args         []string // more flags
}

// startSidecar starts a sidecar, waits until GET /readyz answers 200 and
// registers cleanups that stop it with SIGTERM, which must make it exit 0.
func startSidecar(t *testing.T, name string, o sidecarOptions) *sidecar {
	t.Helper()
	args := []string{
		"-config", o.Rules,
		"-grpc-addr", "127.0.0.1:0",
		"-http-addr", "127.0.0.1:0",
		"-key-prefix", "e2e",
		"-log-level", "info",
		"-log-format", "json",
	}
	if o.RedisURL != "" { // else the in-memory store, which takes no Redis flags
		args = append(args, "-redis-url", o.RedisURL, "-redis-timeout", o.RedisTimeout.String())
	}
	p := startProc(t, name, o.Bin, append(args, o.Args...)...)
	// Runs before startProc's cleanup (LIFO), which then only logs.
	s := &sidecar{proc: p}
	t.Cleanup(func() {
		if s.killed.Load() {
			return
		}
		if err := p.stop(); err != nil {
			t.Errorf("%s: SIGTERM: %v, want exit status 0", name, err)
		}
	})
	deadline := time.Now().Add(startTimeout)
	for s.GRPCAddr == "" {
		if p.Exited() {
			t.Fatalf("%s exited before serving: %v", name, p.Wait())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no \"serving\" log line within %v", name, startTimeout)
		}
		s.GRPCAddr, s.HTTPAddr, _ = sidecartest.ServingAddrs(p.Output())
		time.Sleep(10 * time.Millisecond)
	}
	if s.HTTPAddr == "" {
		t.Fatalf("%s: \"serving\" line has no http_addr", name)
	}
	waitHTTP(t, name+" /readyz", "http://"+s.HTTPAddr+"/readyz", p, deadline)
	return s
}

// waitHTTP polls url until it answers 200, p exits or deadline passes.
func waitHTTP(t *testing.T, what, url string, p *proc, deadline time.Time) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	var last string
	for {
		if p.Exited() {
			t.Fatalf("%s: process exited while waiting: %v", what, p.Wait())
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not 200 in time (last: %s)", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyz returns the status code of GET /readyz, or 0 when it cannot be
// reached.
func (s *sidecar) readyz() int {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + s.HTTPAddr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitReadyz polls GET /readyz until it answers want or timeout passes, and
// returns how long that took.
func (s *sidecar) waitReadyz(t *testing.T, want int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := s.readyz()
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Errorf("%s: GET /readyz = %d after %v, want %d", s.Name(), got, timeout, want)
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nonJSONLines returns the lines of the process's output that are not JSON
// objects.
func (s *sidecar) nonJSONLines() []string {
	var bad []string
	sc := bufio.NewScanner(strings.NewReader(s.Output()))
	for sc.Scan() {
		var obj map[string]any
		if line := sc.Text(); strings.TrimSpace(line) != "" && json.Unmarshal([]byte(line), &obj) != nil {
			bad = append(bad, line)
		}
	}
	return bad
}
