//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/racetest"
)

// Built or found once per test binary by TestMain.
var (
	repoRoot   string // the directory of go.mod
	sidecarBin string // ratelimit-sidecar built from ./cmd/ratelimit-sidecar
	envoyBin   string // Envoy 1.40 from scripts/envoy.sh
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "ratelimit-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := setup(tmp); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// setup finds the repository, builds the sidecar into dir and finds Envoy.
// A missing Envoy or redis-server is a failure, not a skip.
func setup(dir string) error {
	gomod, err := command("", "go", "env", "GOMOD")
	if err != nil {
		return err
	}
	if gomod == "" || gomod == os.DevNull {
		return fmt.Errorf("go env GOMOD: not in a module")
	}
	repoRoot = filepath.Dir(gomod)
	sidecarBin = filepath.Join(dir, "ratelimit-sidecar")
	// Race-checked like the tests themselves when they run under -race.
	if _, err := command(repoRoot, "go", racetest.BuildArgs("-o", sidecarBin, "./cmd/ratelimit-sidecar")...); err != nil {
		return err
	}
	if envoyBin, err = command(repoRoot, filepath.Join(repoRoot, "scripts", "envoy.sh")); err != nil {
		return err
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("redis-server: %w (apt-get install redis-server)", err)
	}
	return nil
}

// command runs name in dir and returns its trimmed stdout.
func command(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}
