package faults

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
)

// Rules is the rules file both servers read (envoyproxy/ratelimit's
// format): api_key values far under their limit, and hot values limited to
// HotLimit a day, so that a key driven over its limit stays over it for the
// whole run.
const Rules = `domain: faults
descriptors:
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {unit: day, requests_per_unit: 100}
`

// HotLimit is the hot key's limit in Rules.
const HotLimit = 100

// Server is a rate-limit server under test, started as a child process.
type Server struct {
	Name    string
	Addr    string // gRPC
	Metrics string // URL of its Prometheus metrics; "" when none
	p       *proctest.Process
	log     string // the file its output goes to, when it goes to a file
}

// LogSize is the size of the server's log file, 0 when it has none.
func (s *Server) LogSize() int64 {
	if fi, err := os.Stat(s.log); s.log != "" && err == nil {
		return fi.Size()
	}
	return 0
}

// LogCount is how many lines of the server's log past offset hold text.
func (s *Server) LogCount(offset int64, text string) int {
	if s.log == "" {
		return 0
	}
	b, err := os.ReadFile(s.log)
	if err != nil || int64(len(b)) < offset {
		return 0
	}
	return strings.Count(string(b[offset:]), text)
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.p.Pid() }

// Stop stops the server.
func (s *Server) Stop() { _ = s.p.Stop(5 * time.Second) }

// StartSidecar starts the sidecar binary bin on rules, with its counters in
// the Redis at redisAddr, and waits until it is ready.
func StartSidecar(ctx context.Context, bin, rules, redisAddr string, log io.Writer, extra ...string) (*Server, error) {
	return StartSidecarArgs(ctx, bin, log, append([]string{"-config", rules, "-redis-url", "redis://" + redisAddr + "/0"}, extra...)...)
}

// StartSidecarArgs starts the sidecar binary bin with args (rules and Redis
// among them) on free loopback ports, and waits until it is ready.
func StartSidecarArgs(ctx context.Context, bin string, log io.Writer, args ...string) (*Server, error) {
	ports, err := proctest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	grpcAddr, httpAddr := local.Addr(ports[0]), local.Addr(ports[1])
	args = append([]string{"-grpc-addr", grpcAddr, "-http-addr", httpAddr, "-key-prefix", "faults:"}, args...)
	p, err := proctest.Start(proctest.Options{Name: "ratelimit-sidecar", Path: bin, Args: args, Env: os.Environ(), Stdout: log, Stderr: log})
	if err != nil {
		return nil, err
	}
	s := &Server{Name: "sidecar", Addr: grpcAddr, Metrics: "http://" + httpAddr + "/metrics", p: p}
	if f, ok := log.(*os.File); ok {
		s.log = f.Name()
	}
	return s, ready(ctx, s, "http://"+httpAddr+"/readyz")
}

// StartReference starts envoyproxy/ratelimit's binary bin on the rules in
// root/current/config, with its counters in the Redis at redisAddr, and
// waits until it is ready.
func StartReference(ctx context.Context, bin, root, redisAddr string, log io.Writer) (*Server, error) {
	return StartReferenceEnv(ctx, bin, root, log, "REDIS_URL="+redisAddr)
}

// StartReferenceEnv is StartReference with the Redis settings given as its
// environment: REDIS_TYPE, REDIS_URL.
func StartReferenceEnv(ctx context.Context, bin, root string, log io.Writer, redisEnv ...string) (*Server, error) {
	ports, err := proctest.FreePorts(4)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=current", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "REDIS_SOCKET_TYPE=tcp", "CACHE_KEY_PREFIX=faults:",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+local.Addr(ports[3]),
		"LOG_LEVEL=warn", "LOG_FORMAT=json")
	env = append(env, redisEnv...)
	p, err := proctest.Start(proctest.Options{Name: "envoyproxy/ratelimit", Path: bin, Env: env, Stdout: log, Stderr: log})
	if err != nil {
		return nil, err
	}
	s := &Server{Name: "reference", Addr: local.Addr(ports[0]), p: p}
	return s, ready(ctx, s, "http://"+local.Addr(ports[1])+"/healthcheck")
}

// ReferenceRoot writes Rules where envoyproxy/ratelimit reads them, under
// dir, and returns its RUNTIME_ROOT.
func ReferenceRoot(dir string) (string, error) {
	config := filepath.Join(dir, "current", "config")
	if err := os.MkdirAll(config, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(config, "faults.yaml"), []byte(Rules), 0o644)
}

func ready(ctx context.Context, s *Server, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := s.p.WaitFor(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		_, err := local.Get(ctx, url)
		return err
	})
	if err != nil {
		s.Stop()
		return fmt.Errorf("%s not ready: %w\n%s", s.Name, err, s.p.Output())
	}
	return nil
}

// Usage is what the sidecar process holds at one instant.
type Usage struct {
	RSSMB      float64 `json:"rss_mb"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	RedisConns int     `json:"redis_conns"` // through the fault proxy
	HeapMB     float64 `json:"heap_mb"`
}

// Max is the larger of each field.
func (u Usage) Max(v Usage) Usage {
	return Usage{max(u.RSSMB, v.RSSMB), max(u.Goroutines, v.Goroutines), max(u.FDs, v.FDs), max(u.RedisConns, v.RedisConns), max(u.HeapMB, v.HeapMB)}
}

// Sample reads s's RSS and open file descriptors from /proc and its
// goroutines from its metrics; conns is the Redis connections the proxy
// sees.
func Sample(ctx context.Context, s *Server, conns int) Usage {
	u := Usage{RedisConns: conns}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid()) + "/status"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				u.RSSMB = kb / 1024
			}
		}
	}
	if fds, err := os.ReadDir("/proc/" + strconv.Itoa(s.Pid()) + "/fd"); err == nil {
		u.FDs = len(fds)
	}
	if s.Metrics != "" {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if body, err := local.Get(ctx, s.Metrics); err == nil {
			u.Goroutines = int(metric(body, "go_goroutines"))
			u.HeapMB = metric(body, "go_memstats_heap_alloc_bytes") / (1 << 20)
		}
	}
	return u
}

// metric is the value of a metric in a Prometheus text page: the line that
// starts with name, labels included.
func metric(body, name string) float64 {
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// cpuTicks is the process's user and system time, in clock ticks (USER_HZ,
// 100 on Linux), or 0 when it cannot be read.
func cpuTicks(pid int) uint64 {
	n, _ := local.CPUTicks(pid)
	return n
}
