//go:build e2e

package e2e

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/sidecartest"
)

// stopGrace is how long a process may take to exit after SIGTERM before its
// group is killed.
const stopGrace = 5 * time.Second

// proc is a child process owned by one test. It runs in its own process
// group, so stopping it also stops anything it forked, and it dies with the
// test binary (Pdeathsig) if that is killed outright.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *sidecartest.Buffer // stdout and stderr, interleaved
	done chan struct{}       // closed once the process has exited
	err  error               // Wait's result, set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// startProc starts bin with args and registers t.Cleanup to stop it and, when
// t failed, to log its output.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := &sidecartest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild holding the output pipe must not block Wait forever.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- %s (%s) output ---\n%s", name, cmd, out.String())
		}
	})
	return p
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

// output returns what the process wrote so far.
func (p *proc) output() string { return p.out.String() }

// stop sends SIGTERM to the process group, waits up to stopGrace and then
// kills the group. It returns the exit error of a process that exited after
// SIGTERM (nil for exit status 0), or an error saying it had to be killed or
// had exited before. It is idempotent.
func (p *proc) stop() error {
	p.stopOnce.Do(func() {
		if p.exited() {
			p.stopErr = errors.Join(errors.New("exited before it was stopped"), p.err)
			return
		}
		_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
			p.stopErr = p.err
		case <-time.After(stopGrace):
			_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
			<-p.done
			p.stopErr = errors.New("did not exit within " + stopGrace.String() + " of SIGTERM; killed")
		}
	})
	return p.stopErr
}
