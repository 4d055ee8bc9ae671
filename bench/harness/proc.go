package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
)

// startProc starts bin with args and env added to the harness's environment (later entries win); its stdout
// goes to stdout (or the log when nil), its stderr to the log. Children get their own process group, so a ^C
// at the terminal reaches the harness alone and it stops them in order, and die with the harness if it is
// killed outright.
func startProc(name string, log io.Writer, stdout io.Writer, env []string, bin string, args ...string) (*proctest.Process, error) {
	if stdout == nil {
		stdout = log
	}
	return proctest.Start(proctest.Options{Name: name, Path: bin, Args: args, Env: append(os.Environ(), env...),
		Stdout: stdout, Stderr: log})
}

// rss returns the process's resident set size in bytes.
func rss(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

// ioBytes returns the bytes the process read and wrote through system calls (sockets included).
func ioBytes(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0, err
	}
	return parseIO(b)
}

// clockTicks returns USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux the harness will meet, but
// asked of getconf rather than assumed.
func clockTicks(ctx context.Context) float64 {
	out, err := exec.CommandContext(ctx, "getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			return v
		}
	}
	return 100
}

// waitListening reads the child's stdout until its "listening on ADDR" line and returns ADDR; the rest of the
// output goes to log.
func waitListening(ctx context.Context, p *proctest.Process, out io.Reader, log io.Writer, timeout time.Duration) (string, error) {
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "listening on "); ok && !sent {
				addrc <- a
				sent = true
				continue
			}
			fmt.Fprintln(log, line)
		}
	}()
	select {
	case a := <-addrc:
		return a, nil
	case <-p.Done():
		return "", fmt.Errorf("%s exited before listening: %v", p.Name(), p.Wait())
	case <-time.After(timeout):
		return "", fmt.Errorf("%s: no \"listening on\" line after %v", p.Name(), timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, p *proctest.Process, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.WaitFor(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second) // per attempt
		defer cancel()
		_, err := local.Get(ctx, url)
		return err
	})
}
