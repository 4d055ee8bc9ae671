package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartWith(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		// client returns the client to test s through.
		client func(t *testing.T, s *Server) *redis.Client
		// check runs extra assertions.
		check func(t *testing.T, ctx context.Context, s *Server, c *redis.Client)
	}{
		{
			name:   "default",
			client: func(t *testing.T, s *Server) *redis.Client { return s.Client(t) },
			check: func(t *testing.T, ctx context.Context, s *Server, c *redis.Client) {
				if s.Socket() != "" {
					t.Errorf("Socket() = %q, want \"\"", s.Socket())
				}
				opt, err := redis.ParseURL(s.URL())
				if err != nil || opt.Addr != s.Addr || opt.DB != 0 {
					t.Errorf("ParseURL(%q) = %+v, %v; want Addr %s DB 0", s.URL(), opt, err, s.Addr)
				}
				// Persistence is off.
				got, err := c.ConfigGet(ctx, "save").Result()
				if err != nil || got["save"] != "" {
					t.Errorf("CONFIG GET save = %v, %v; want \"\"", got, err)
				}
				got, err = c.ConfigGet(ctx, "appendonly").Result()
				if err != nil || got["appendonly"] != "no" {
					t.Errorf("CONFIG GET appendonly = %v, %v; want no", got, err)
				}
			},
		},
		{
			name: "unix socket",
			opts: Options{UnixSocket: true},
			client: func(t *testing.T, s *Server) *redis.Client {
				c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Socket()})
				t.Cleanup(func() { _ = c.Close() })
				return c
			},
			check: func(t *testing.T, ctx context.Context, s *Server, c *redis.Client) {
				if n := len(s.Socket()); n == 0 || n >= 100 {
					t.Errorf("len(Socket()) = %d (%q), want 1..99", n, s.Socket())
				}
				// Same server over TCP.
				if got, err := s.Client(t).Get(ctx, "k").Result(); err != nil || got != "v" {
					t.Errorf("GET k over TCP = %q, %v; want \"v\"", got, err)
				}
			},
		},
		{
			name:   "extra args",
			opts:   Options{Args: []string{"--maxmemory", "1mb"}},
			client: func(t *testing.T, s *Server) *redis.Client { return s.Client(t) },
			check: func(t *testing.T, ctx context.Context, s *Server, c *redis.Client) {
				got, err := c.ConfigGet(ctx, "maxmemory").Result()
				if err != nil || got["maxmemory"] != "1048576" {
					t.Errorf("CONFIG GET maxmemory = %v, %v; want 1048576", got, err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := StartWith(t, tt.opts)
			if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
				t.Errorf("Addr = %q, want 127.0.0.1:port", s.Addr)
			}
			if s.Pid() <= 0 {
				t.Errorf("Pid() = %d, want > 0", s.Pid())
			}
			c := tt.client(t, s)
			if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Fatalf("PING = %q, %v; want PONG", got, err)
			}
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET k v: %v", err)
			}
			if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
				t.Errorf("GET k = %q, %v; want \"v\"", got, err)
			}
			if !strings.Contains(s.Log(), "Ready to accept connections") {
				t.Errorf("Log() = %q, want it to contain \"Ready to accept connections\"", s.Log())
			}
			tt.check(t, ctx, s, c)
		})
	}
}

// TestLaunch: without a testing.TB, in the given directory, with the given
// TestClusterWithReplicas: three masters, each with a replica that follows
// it, and the cluster serves.
func TestClusterWithReplicas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartClusterWithReplicas(t, 3)
	if len(c.Addrs) != 3 {
		t.Fatalf("len(Addrs) = %d, want 3", len(c.Addrs))
	}
	for i, a := range c.Addrs {
		v, err := do(ctx, c.Replica(i).Addr, "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		info := asString(v)
		if got := "127.0.0.1:" + infoField(info, "master_port"); infoField(info, "role") != "slave" || got != a {
			t.Errorf("Replica(%d) role %s of %s, want slave of %s", i, infoField(info, "role"), got, a)
		}
	}
	cc := c.Client(t)
	if err := cc.Set(ctx, "{x}k", 1, 0).Err(); err != nil {
		t.Errorf("SET on a replicated cluster: %v", err)
	}
}

// binary; errors are returned, not fatal.
func TestLaunch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if _, err := Launch(ctx, Options{}); err == nil {
		t.Error("Launch without Dir = nil error, want one")
	}
	dir := t.TempDir()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Launch(ctx, Options{Bin: bin, Dir: dir})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	defer s.Stop()
	if got, err := s.Client(t).Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Errorf("PING = %q, %v; want PONG", got, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "redis.log")); err != nil || !strings.Contains(string(b), "Ready to accept connections") {
		t.Errorf("%s/redis.log = %q, %v; want the server's log", dir, b, err)
	}
	s.Stop()
	if s.Pid() != 0 {
		t.Errorf("Pid() after Stop = %d, want 0", s.Pid())
	}

	_, err = Launch(ctx, Options{Dir: t.TempDir(), Args: []string{"--no-such-directive", "1"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("Launch with a bad argument = %v, want an error with the server's complaint", err)
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := StartWith(t, Options{UnixSocket: true})
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET k v: %v", err)
	}
	addr, sock, pid := s.Addr, s.Socket(), s.Pid()

	s.Stop()
	s.Stop() // idempotent
	if got := s.Pid(); got != 0 {
		t.Errorf("Pid() after Stop = %d, want 0", got)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Errorf("PING after Stop = nil error, want one")
	}

	s.Restart(t)
	if s.Addr != addr || s.Socket() != sock {
		t.Errorf("after Restart Addr, Socket = %s, %s; want %s, %s", s.Addr, s.Socket(), addr, sock)
	}
	if got := s.Pid(); got == 0 || got == pid {
		t.Errorf("Pid() after Restart = %d, want a new non-zero pid (old %d)", got, pid)
	}
	// The old client reconnects to the same address.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Restart: %v", err)
	}
	// No persistence: the data is gone.
	if got, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET k after Restart = %q, %v; want redis.Nil", got, err)
	}
	if err := c.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Errorf("SET after Restart: %v", err)
	}
	if n := strings.Count(s.Log(), "Ready to accept connections"); n != 2 {
		t.Errorf("Log() has %d \"Ready to accept connections\", want 2 (one per run)", n)
	}
}

func TestCommandStats(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil { // connect before the first snapshot
		t.Fatalf("PING: %v", err)
	}
	before, err := s.CommandStats(ctx)
	if err != nil {
		t.Fatalf("CommandStats: %v", err)
	}
	if err := c.Incr(ctx, "n").Err(); err != nil {
		t.Fatalf("INCR n: %v", err)
	}
	after, err := s.CommandStats(ctx)
	if err != nil {
		t.Fatalf("CommandStats: %v", err)
	}
	for cmd, want := range map[string]int64{"incr": 1, "get": 0, "info": 1} {
		if got := after[cmd] - before[cmd]; got != want {
			t.Errorf("calls of %q grew by %d, want %d (before %v, after %v)", cmd, got, want, before, after)
		}
	}
}

func TestReadReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // fmt %#v of the reply
		wantErr bool
	}{
		{in: "+OK\r\n", want: `"OK"`},
		{in: ":42\r\n", want: `42`},
		{in: "$3\r\nfoo\r\n", want: `"foo"`},
		{in: "$0\r\n\r\n", want: `""`},
		{in: "$-1\r\n", want: `<nil>`},
		{in: "*2\r\n$1\r\na\r\n:1\r\n", want: `[]interface {}{"a", 1}`},
		{in: "*-1\r\n", want: `<nil>`},
		{in: "-ERR nope\r\n", wantErr: true},
		{in: "?\r\n", wantErr: true},
		{in: "+OK\n", wantErr: true},
		{in: "$5\r\nab\r\n", wantErr: true},
	}
	for _, tt := range tests {
		got, err := readReply(bufio.NewReader(strings.NewReader(tt.in)))
		if (err != nil) != tt.wantErr {
			t.Errorf("readReply(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if s := fmt.Sprintf("%#v", got); !tt.wantErr && s != tt.want && !(got == nil && tt.want == "<nil>") {
			t.Errorf("readReply(%q) = %s, want %s", tt.in, s, tt.want)
		}
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartCluster(t, 3)
	if len(c.Addrs) != 3 {
		t.Fatalf("len(Addrs) = %d, want 3", len(c.Addrs))
	}
	cc := c.Client(t)

	// owner maps each key to the address of its master.
	owner := map[string]string{}
	masters := map[string]bool{}
	for i := range 16 {
		key := fmt.Sprintf("{tag%d}k", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := cc.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%s): %v", key, err)
		}
		owner[key] = m.Options().Addr
		masters[owner[key]] = true
	}
	if len(masters) < 2 {
		t.Fatalf("16 hash tags landed on masters %v, want at least 2", masters)
	}

	// Stop the owner of the first key; find a key owned by another master.
	down, up := "{tag0}k", ""
	victim := -1
	for i, a := range c.Addrs {
		if a == owner[down] {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("owner %s of %s is not in Addrs %v", owner[down], down, c.Addrs)
	}
	for k, a := range owner {
		if a != owner[down] {
			up = k
			break
		}
	}
	c.Node(victim).Stop()

	opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cc.Set(opCtx, down, "x", 0).Err(); err == nil {
		t.Errorf("SET %s on stopped master %s = nil error, want one", down, owner[down])
	}
	if err := cc.Set(opCtx, up, "y", 0).Err(); err != nil {
		t.Errorf("SET %s on live master %s: %v", up, owner[up], err)
	}
	if got, err := cc.Get(opCtx, up).Result(); err != nil || got != "y" {
		t.Errorf("GET %s = %q, %v; want \"y\"", up, got, err)
	}
}

func TestFatal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start func(tb testing.TB)
		want  []string // substrings of the failure message
	}{
		{
			name:  "cluster of 2",
			start: func(tb testing.TB) { StartCluster(tb, 2) },
			want:  []string{"at least 3"},
		},
		{
			name:  "bad argument",
			start: func(tb testing.TB) { StartWith(tb, Options{Args: []string{"--no-such-directive", "1"}}) },
			// The server's own complaint, from its log.
			want: []string{"process exited", "--- log ---", "no-such-directive"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ft := &fatalTB{TB: t}
			done := make(chan struct{})
			go func() { // Fatalf ends this goroutine with runtime.Goexit.
				defer close(done)
				tt.start(ft)
			}()
			<-done
			if ft.msg == "" {
				t.Fatalf("start did not call Fatalf")
			}
			for _, w := range tt.want {
				if !strings.Contains(ft.msg, w) {
					t.Errorf("Fatalf message = %q, want it to contain %q", ft.msg, w)
				}
			}
		})
	}
}

// fatalTB records Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := StartSentinel(t)
	if len(s.SentinelAddrs) != 3 || s.MasterName == "" {
		t.Fatalf("SentinelAddrs, MasterName = %v, %q; want 3 addresses and a name", s.SentinelAddrs, s.MasterName)
	}
	fc := s.FailoverClient(t)
	if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET k v through sentinels: %v", err)
	}
	// Make sure the replica has it before the master dies.
	if n, err := fc.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 2000 = %d, %v; want 1", n, err)
	}

	old := s.Master.Addr
	start := time.Now()
	s.KillMaster()
	if s.Master.Pid() != 0 {
		t.Errorf("Master.Pid() after KillMaster = %d, want 0", s.Master.Pid())
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	got, err := s.WaitForNewMaster(wctx, old)
	if err != nil {
		t.Fatalf("WaitForNewMaster: %v", err)
	}
	if got != s.Replica.Addr {
		t.Fatalf("WaitForNewMaster = %s, want the replica %s", got, s.Replica.Addr)
	}
	t.Logf("replica promoted %v after KillMaster", time.Since(start).Round(time.Millisecond))

	// The failover client follows the switch; give it a moment to notice.
	var werr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if werr = fc.Set(ctx, "k2", "w", 0).Err(); werr == nil {
			break
		}
	}
	if werr != nil {
		t.Fatalf("SET through sentinels after failover: %v", werr)
	}
	if got, err := s.Replica.Client(t).Get(ctx, "k2").Result(); err != nil || got != "w" {
		t.Errorf("GET k2 on the promoted replica = %q, %v; want \"w\"", got, err)
	}
	if got, err := fc.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET k after failover = %q, %v; want \"v\" (replicated before the kill)", got, err)
	}
}

// TestPause: a paused server answers nothing, and answers again once the
// test that paused it has ended.
func TestPause(t *testing.T) {
	t.Parallel()
	s := Start(t)
	// The context's deadline, not go-redis's 3 s read timeout, ends a call.
	c := s.BoundedClient(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("paused", func(t *testing.T) {
		s.Pause(t)
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Error("PING to a paused server was answered")
		}
	})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after the pausing test ended: %v", err)
	}
}
