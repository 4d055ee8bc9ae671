package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long one process may take to answer PING.
	readyTimeout = 10 * time.Second
	// pollInterval is the pause between readiness probes.
	pollInterval = 10 * time.Millisecond
	// bindAttempts is how many ports are tried when another process takes
	// the free port between our probe and redis-server's bind.
	bindAttempts = 5
	// installHint ends the message of a missing-binary failure.
	installHint = "apt-get install redis-server redis-sentinel redis-tools"
)

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("address already in use")

// Options configures StartWith and Launch. The zero value starts a plain TCP
// server, exactly like Start.
type Options struct {
	// Args are extra redis-server arguments, for example
	// []string{"--maxmemory", "10mb"}. They follow the defaults
	// (--port, --bind 127.0.0.1, --save "", --appendonly no, --dir), so they
	// may override any of them except --port and --bind, which the helper
	// relies on.
	Args []string
	// UnixSocket makes the server also listen on a unix socket in a short
	// temporary directory (paths must stay under ~100 bytes), removed in
	// tb.Cleanup; with Launch the socket is redis.sock in Dir. See
	// Server.Socket.
	UnixSocket bool
	// Bin is the redis-server binary; empty means redis-server on PATH.
	Bin string
	// Dir is the server's working directory (--dir), which holds its log,
	// redis.log. StartWith uses a new temporary directory when it is empty;
	// Launch requires it.
	Dir string
}

// Server is one redis-server (or redis-sentinel) process listening on
// 127.0.0.1 on a port that was free when it started. Its methods are safe for
// concurrent use; Restart, like every method taking a testing.TB, must be
// called from the test goroutine.
type Server struct {
	// Addr is "127.0.0.1:port". It stays the same across Restart.
	Addr string

	bin     string
	args    []string // argv for the current port, reused by Restart
	port    int
	dir     string // working directory (--dir) holding the log
	sock    string // unix socket path, "" without Options.UnixSocket
	logPath string

	mu   sync.Mutex
	proc *proctest.Process // nil while stopped
}

// Start starts a redis-server with default options, waits until it answers
// PING and registers tb.Cleanup to kill it. It calls tb.Fatal, with the
// server's log, if the server does not come up.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with options.
func StartWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	return startServer(tb, opts, false)
}

// Launch starts a redis-server as StartWith does, for a program rather than a
// test (the benchmark harness): it returns an error, holding the server's log,
// instead of failing a test, and the caller stops the server with Stop.
// opts.Dir must be set.
func Launch(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("redistest: Launch needs Options.Dir")
	}
	bin := opts.Bin
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("redistest: redis-server not found on PATH (%v); install it: %s", err, installHint)
		}
	}
	var sock string
	if opts.UnixSocket {
		sock = filepath.Join(opts.Dir, "redis.sock")
	}
	return newServer(ctx, bin, opts.Dir, false, serverArgs(opts, opts.Dir, sock), sock)
}

// startServer starts a redis-server; withBus also requires port+10000 (the
// cluster bus port) to be free.
func startServer(tb testing.TB, opts Options, withBus bool) *Server {
	tb.Helper()
	bin := opts.Bin
	if bin == "" {
		bin = lookPath(tb, "redis-server")
	}
	var sock string
	if opts.UnixSocket {
		sock = filepath.Join(sidecartest.SocketDir(tb), "redis.sock")
	}
	dir := opts.Dir
	if dir == "" {
		dir = tb.TempDir()
	}
	return start(tb, bin, dir, withBus, serverArgs(opts, dir, sock), sock)
}

// serverArgs returns the redis-server arguments for a port: the defaults
// (see Options.Args), then opts.Args.
func serverArgs(opts Options, dir, sock string) func(port int) ([]string, error) {
	return func(port int) ([]string, error) {
		args := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", dir,
		}
		if sock != "" {
			args = append(args, "--unixsocket", sock, "--unixsocketperm", "700")
		}
		return append(args, opts.Args...), nil
	}
}

// start is newServer for a test: it calls tb.Fatal if the server does not
// come up, and registers tb.Cleanup to kill it.
func start(tb testing.TB, bin, dir string, withBus bool, argv func(port int) ([]string, error), sock string) *Server {
	tb.Helper()
	s, err := newServer(tb.Context(), bin, dir, withBus, argv, sock)
	if err != nil {
		tb.Fatalf("%v", err)
		return nil
	}
	// Registered after dir was made, so it runs before dir is removed.
	tb.Cleanup(s.Stop)
	return s
}

// newServer picks a free port, runs bin with argv(port) in dir and waits
// until it is ready, retrying on a new port if the bind lost a race. Its
// error holds the server's log.
func newServer(ctx context.Context, bin, dir string, withBus bool, argv func(port int) ([]string, error), sock string) (*Server, error) {
	s := &Server{bin: bin, dir: dir, sock: sock, logPath: filepath.Join(dir, "redis.log")}
	var err error
	for range bindAttempts {
		var port int
		if port, err = freePort(withBus); err != nil {
			break
		}
		var args []string
		if args, err = argv(port); err != nil {
			break
		}
		s.port, s.args, s.Addr = port, args, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = s.launch(ctx); err == nil {
			return s, nil
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, fmt.Errorf("redistest: start %s: %v\n--- log ---\n%s", filepath.Base(bin), err, s.Log())
}

// lookPath finds a binary on PATH or fails the test with an install hint.
func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("redistest: %s not found on PATH (%v); install it: %s", name, err, installHint)
	}
	return p
}

// freePort returns a port on 127.0.0.1 that was free a moment ago; withBus
// also requires port+10000 to be free.
func freePort(withBus bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !withBus {
			_ = l.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			_ = l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port with a free cluster bus port (+10000)")
}

// launch starts the process with s.args and waits until it answers PING with
// its own pid. On failure the process is stopped; the error wraps
// errAddrInUse if the port was taken.
func (s *Server) launch(ctx context.Context) error {
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	logStart := fi.Size()
	// An *os.File, not a pipe: a forked child (diskless replication sync)
	// holding a pipe open would block Wait after SIGKILL.
	p, err := proctest.Start(proctest.Options{Path: s.bin, Args: s.args, Dir: s.dir, Stdout: f, Stderr: f})
	_ = f.Close()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	if err := waitReady(ctx, p, s.Addr); err != nil {
		s.Stop()
		if log := s.Log(); int64(len(log)) > logStart && strings.Contains(log[logStart:], "Address already in use") {
			return fmt.Errorf("port %d: %w", s.port, errAddrInUse)
		}
		return err
	}
	return nil
}

// waitReady polls addr until it answers PING and INFO reports p's pid (so
// that a server of another test that won the race for the port is not
// mistaken for ours), p exits, or readyTimeout passes.
func waitReady(ctx context.Context, p *proctest.Process, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return p.WaitFor(ctx, pollInterval, func(ctx context.Context) error {
		if _, err := do(ctx, addr, "PING"); err != nil {
			return err
		}
		info, err := do(ctx, addr, "INFO", "server")
		if err != nil {
			return err
		}
		if got := infoField(asString(info), "process_id"); got != strconv.Itoa(p.Pid()) {
			return fmt.Errorf("%s answered by pid %s, want %d", addr, got, p.Pid())
		}
		return nil
	})
}

// poll calls check every pollInterval until it returns nil or ctx is done;
// then it returns the last error.
func poll(ctx context.Context, check func(ctx context.Context) error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// URL returns "redis://127.0.0.1:port/0", for redis.ParseURL and flags.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Socket returns the unix socket path, or "" if Options.UnixSocket was not set.
func (s *Server) Socket() string { return s.sock }

// Client returns a go-redis client for s with default options but RESP2,
// as the sidecar's client speaks, closed in tb.Cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// BoundedClient is Client with the options the sidecar's counting path
// uses: no retries, and the context's deadline, not go-redis's own read
// and write timeouts, bounds each call. For tests of how long calls to a
// slow or hung server take.
func (s *Server) BoundedClient(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the process (SIGKILL, so nothing is flushed) and waits until it
// has exited. It is idempotent and safe to call concurrently.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.Kill()
	s.proc = nil
}

// Restart stops the process if it runs and starts it again with the same
// arguments on the same port, so Addr, URL and Socket stay valid; data is
// lost (no persistence) except what a cluster node keeps in its nodes.conf or
// a sentinel in its config file. It waits until the server is ready and calls
// tb.Fatal if it is not, for example when another process took the port.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	var err error
	for range bindAttempts {
		if err = s.launch(tb.Context()); err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("redistest: restart %s: %v\n--- log ---\n%s", s.Addr, err, s.Log())
}

// Log returns the process's output so far (all runs, across Restart), or ""
// if it cannot be read.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// Pid returns the process id, or 0 while the server is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// Pause freezes the process (SIGSTOP) until tb ends: connections stay open
// but nothing is answered, as from a hung server, where a stopped one would
// refuse connections at once. The process is resumed (SIGCONT) in
// tb.Cleanup, so Stop and the temp dir's removal still work.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	pid := s.Pid()
	if pid == 0 {
		tb.Fatal("redistest: Pause of a stopped server")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		tb.Fatalf("redistest: pause: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// CommandStats returns INFO commandstats as command name (lower case, with
// "|" before a subcommand, e.g. "client|setinfo") -> number of calls since
// the server started. It uses a raw connection, so its own INFO is the only
// call it adds; compare two snapshots to count round trips.
func (s *Server) CommandStats(ctx context.Context) (map[string]int64, error) {
	v, err := do(ctx, s.Addr, "INFO", "commandstats")
	if err != nil {
		return nil, fmt.Errorf("redistest: info commandstats: %w", err)
	}
	stats := make(map[string]int64)
	for line := range strings.SplitSeq(asString(v), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if n, ok := strings.CutPrefix(field, "calls="); ok {
				calls, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("redistest: commandstats line %q: %w", line, err)
				}
				stats[strings.TrimPrefix(name, "cmdstat_")] = calls
			}
		}
	}
	return stats, nil
}
