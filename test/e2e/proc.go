//go:build e2e

package e2e

import (
	"testing"
	"time"

	childproc "github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
)

// stopGrace is how long a process may take to exit after SIGTERM before its
// group is killed.
const stopGrace = 5 * time.Second

// proc is a child process owned by one test, its stdout and stderr kept
// interleaved in its Output.
type proc struct {
	*childproc.Process
}

// startProc starts bin with args and registers t.Cleanup to stop it and, when
// t failed, to log its output.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	return startProcOpts(t, childproc.Options{Name: name, Path: bin, Args: args})
}

// startProcEnv is startProc for a process that takes its settings from
// env, its whole environment, instead of arguments.
func startProcEnv(t *testing.T, name, bin string, env []string) *proc {
	t.Helper()
	return startProcOpts(t, childproc.Options{Name: name, Path: bin, Env: env})
}

func startProcOpts(t *testing.T, o childproc.Options) *proc {
	t.Helper()
	name := o.Name
	p, err := childproc.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(stopGrace)
		if t.Failed() {
			t.Logf("--- %s (%s) output ---\n%s", name, p, p.Output())
		}
	})
	return &proc{Process: p}
}

// stop sends SIGTERM to the process group, waits up to stopGrace and then
// kills the group; see childproc.Process.Stop for what it returns.
func (p *proc) stop() error { return p.Stop(stopGrace) }
