// Package proctest runs child processes for the tests and the benchmark harness: it starts a binary with
// arguments and an environment, sends its output to a writer, a file or a buffer of its own, waits until it
// is ready, stops it (SIGTERM, then SIGKILL after a grace period) and reports how it exited.
//
// A child runs in its own process group, so that stopping it also stops whatever it forked and a ^C at the
// terminal reaches the parent alone, which then stops its children in order. It is killed (SIGKILL) when the
// OS thread that started it exits, which for a Go program that locks no threads means when the parent dies,
// so a killed test binary leaves no servers behind. Linux only.
package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// waitDelay bounds how long Wait waits, after the process has exited, for a grandchild that still holds an
// output pipe open.
const waitDelay = time.Second

// ErrExited is wrapped by WaitFor's error when the process exits before it is ready, and by Stop's when it
// had exited before it was stopped.
var ErrExited = errors.New("process exited")

// Options configures Start.
type Options struct {
	// Path is the binary to run, a path or a name looked up on PATH.
	Path string
	// Args are its arguments, without the program name.
	Args []string
	// Name names the process in errors; the base name of Path when empty.
	Name string
	// Env is the environment as exec.Cmd takes it: nil inherits the parent's, an empty slice gives none.
	Env []string
	// Dir is the working directory; empty means the parent's.
	Dir string
	// Stdout and Stderr receive the process's output. A nil one goes to the process's own buffer, read with
	// Output. An *os.File is handed to the child as it is, so a grandchild that inherits it and lives on
	// cannot hold up the parent; any other writer is fed through a pipe.
	Stdout, Stderr io.Writer
}

// Process is a started child process. Its methods are safe for concurrent use.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  buffer
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // exec.Cmd.Wait's result, set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// Start starts the process described by o. It does not wait for it to be ready: see WaitFor.
func Start(o Options) (*Process, error) {
	name := o.Name
	if name == "" {
		name = filepath.Base(o.Path)
	}
	p := &Process{name: name, done: make(chan struct{})}
	cmd := exec.Command(o.Path, o.Args...)
	cmd.Env, cmd.Dir = o.Env, o.Dir
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = &p.out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &p.out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Name returns the name the process goes by in errors.
func (p *Process) Name() string { return p.name }

// String returns the command line, for logs.
func (p *Process) String() string { return p.cmd.String() }

// Pid returns the process id, also after the process has exited.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done returns a channel that is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits until the process has exited and returns how: nil for exit status 0, else an *exec.ExitError
// (or exec.ErrWaitDelay when a grandchild held its output open).
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Output returns what the process has written so far to the outputs that Options left nil.
func (p *Process) Output() string { return p.out.String() }

// Signal sends sig to the process alone, not to its group.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM to the process group, waits up to grace for the process to exit, and then kills the
// group (SIGKILL). It returns the process's exit error when it exited after SIGTERM (nil for status 0), an
// error wrapping ErrExited when it had exited before, or an error saying it had to be killed. Only the first
// call acts; later calls return its result.
func (p *Process) Stop(grace time.Duration) error {
	p.stopOnce.Do(func() {
		if p.Exited() {
			p.stopErr = fmt.Errorf("%s: %w before it was stopped: %v", p.name, ErrExited, p.err)
			return
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		select {
		case <-p.done:
			p.stopErr = p.err
		case <-time.After(grace):
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
			<-p.done
			p.stopErr = fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.name, grace)
		}
	})
	return p.stopErr
}

// Kill kills the process group (SIGKILL, so nothing is flushed) unless the process has exited, and waits
// until the process has exited. It may be called any number of times.
func (p *Process) Kill() {
	if !p.Exited() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	}
	<-p.done
}

// WaitFor calls ready every interval until it returns nil, and returns nil then. It returns an error wrapping
// ErrExited, with the exit error, once the process has exited, and one wrapping ctx's error, with ready's
// last error, once ctx is done.
func (p *Process) WaitFor(ctx context.Context, interval time.Duration, ready func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if p.Exited() {
			return fmt.Errorf("%s: %w before it was ready: %v", p.name, ErrExited, p.err)
		}
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last error: %v)", p.name, ctx.Err(), err)
		case <-p.done:
		case <-t.C:
		}
	}
}

// buffer is a bytes.Buffer that is safe for concurrent use: the process writes while its owner reads.
type buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago: all n are held open until the last is picked. Another process could
// take one before the child binds it; on a test or benchmark machine
// that is not worth more machinery. It is for a child process that cannot
// be told to listen on port 0 and report it.
func FreePorts(n int) ([]int, error) {
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
