package proctest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sh starts a shell script as a process and kills it when the test ends.
func sh(t *testing.T, o Options, script string) *Process {
	t.Helper()
	o.Path, o.Args = "/bin/sh", []string{"-c", script}
	p, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestOutput(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "err.log")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name       string
		o          Options
		wantOutput string
		wantFile   string
	}{
		{name: "own buffer", wantOutput: "out\nerr\n"},
		{name: "stderr to a file", o: Options{Stderr: f}, wantOutput: "out\n", wantFile: "err\n"},
	}
	for _, tt := range tests {
		p := sh(t, tt.o, `echo out; echo err >&2`)
		if err := p.Wait(); err != nil {
			t.Errorf("%s: Wait() = %v, want nil", tt.name, err)
		}
		if got := p.Output(); got != tt.wantOutput {
			t.Errorf("%s: Output() = %q, want %q", tt.name, got, tt.wantOutput)
		}
		if tt.wantFile != "" {
			if b, _ := os.ReadFile(file); string(b) != tt.wantFile {
				t.Errorf("%s: file has %q, want %q", tt.name, b, tt.wantFile)
			}
		}
	}
}

// TestEnv: Env replaces the environment; nil inherits it.
func TestEnv(t *testing.T) {
	t.Setenv("PROC_TEST", "inherited")
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"ONLY=1"}, "ONLY=1\n"},
		{[]string{}, ""},
	} {
		p, err := Start(Options{Path: "env", Env: tt.env})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil || p.Output() != tt.want {
			t.Errorf("env with Env %q printed %q, %v; want %q", tt.env, p.Output(), err, tt.want)
		}
	}
	p, err := Start(Options{Path: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil || !strings.Contains(p.Output(), "PROC_TEST=inherited\n") {
		t.Errorf("env with Env nil printed %q, %v; want PROC_TEST=inherited among them", p.Output(), err)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	t.Run("exits on SIGTERM", func(t *testing.T) {
		t.Parallel()
		p := sh(t, Options{}, `trap 'exit 0' TERM; echo up; while :; do sleep 0.01; done`)
		waitOutput(t, p, "up")
		if err := p.Stop(5 * time.Second); err != nil {
			t.Errorf("Stop() = %v, want nil", err)
		}
		if err := p.Stop(time.Second); err != nil {
			t.Errorf("second Stop() = %v, want the first's nil", err)
		}
	})
	t.Run("killed after the grace period", func(t *testing.T) {
		t.Parallel()
		p := sh(t, Options{}, `trap '' TERM; echo up; while :; do sleep 0.01; done`)
		waitOutput(t, p, "up")
		err := p.Stop(100 * time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("Stop() = %v, want an error saying it was killed", err)
		}
		if !p.Exited() {
			t.Error("Exited() = false after Stop")
		}
	})
	t.Run("exited before", func(t *testing.T) {
		t.Parallel()
		p := sh(t, Options{}, `exit 3`)
		<-p.Done()
		var exit *exec.ExitError
		if err := p.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("Wait() = %v, want exit status 3", err)
		}
		if err := p.Stop(time.Second); !errors.Is(err, ErrExited) {
			t.Errorf("Stop() = %v, want ErrExited", err)
		}
	})
	t.Run("the group goes too", func(t *testing.T) {
		t.Parallel()
		p := sh(t, Options{}, `sleep 60 & echo $!; wait`)
		waitOutput(t, p, "\n")
		child, err := strconv.Atoi(strings.TrimSpace(p.Output()))
		if err != nil {
			t.Fatal(err)
		}
		p.Kill()
		p.Kill() // a no-op
		deadline := time.Now().Add(5 * time.Second)
		for syscall.Kill(child, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the shell's child %d lives on after Kill", child)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := sh(t, Options{}, `sleep 0.2; echo ready; sleep 60`)
	calls := 0
	err := p.WaitFor(ctx, 10*time.Millisecond, func(context.Context) error {
		calls++
		if !strings.Contains(p.Output(), "ready") {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls < 2 {
		t.Errorf("WaitFor() = %v after %d calls, want nil after several", err, calls)
	}

	never := func(context.Context) error { return errors.New("never ready") }
	dead := sh(t, Options{}, `exit 1`)
	if err := dead.WaitFor(ctx, 10*time.Millisecond, never); !errors.Is(err, ErrExited) {
		t.Errorf("WaitFor() on an exiting process = %v, want ErrExited", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = p.WaitFor(short, 10*time.Millisecond, never)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "never ready") {
		t.Errorf("WaitFor() past the deadline = %v, want DeadlineExceeded with the last error", err)
	}
}

func TestStartError(t *testing.T) {
	t.Parallel()
	if _, err := Start(Options{Path: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Start(missing binary) = %v, want an error naming it", err)
	}
}

// waitOutput waits until the process has written s.
func waitOutput(t *testing.T, p *Process, s string) {
	t.Helper()
	err := p.WaitFor(t.Context(), 5*time.Millisecond, func(context.Context) error {
		if !strings.Contains(p.Output(), s) {
			return errors.New("no " + strconv.Quote(s) + " yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	t.Parallel()
	ports, err := FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want 4 distinct", ports)
		}
		seen[p] = true
	}
}
