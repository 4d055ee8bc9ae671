package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process the harness owns. Children get their own process group, so a ^C at the terminal
// reaches the harness alone and it stops them in order, and die with the harness if it is killed outright.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done is closed
}

// startProc starts bin with args and env added to the harness's environment (later entries win); its stdout
// goes to stdout (or the log when nil), its stderr to the log.
func startProc(name string, log io.Writer, stdout io.Writer, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if stdout == nil {
		stdout = log
	}
	cmd.Stdout, cmd.Stderr = stdout, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then kills. Stopping an exited process is a no-op.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuTicks returns the process's utime+stime in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatTicks(b)
}

// rss returns the process's resident set size in bytes.
func rss(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
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

// freePorts returns n distinct loopback TCP ports that were free a moment ago: all n are held open until
// the last is picked. Another process could take one before the child binds it; on a benchmark machine that
// is not worth more machinery.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// waitListening reads the child's stdout until its "listening on ADDR" line and returns ADDR; the rest of the
// output goes to log.
func waitListening(ctx context.Context, p *proc, out io.Reader, log io.Writer, timeout time.Duration) (string, error) {
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
	case <-p.done:
		return "", fmt.Errorf("%s exited before listening: %v", p.name, p.err)
	case <-time.After(timeout):
		return "", fmt.Errorf("%s: no \"listening on\" line after %v", p.name, timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, p *proc, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("status %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before ready: %v", p.name, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %v: %w", url, timeout, errors.Join(last))
}

// httpGet returns the body of url.
func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}
