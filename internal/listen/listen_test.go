package listen

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
)

func TestListen(t *testing.T) {
	t.Parallel()
	dir := sidecartest.SocketDir(t)

	// A socket file left behind is replaced.
	stale := filepath.Join(dir, "stale.sock")
	old, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	ln, err := Listen("unix://" + stale)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}

	// A socket still served on is not taken over.
	if second, err := Listen("unix://" + stale); err == nil || !strings.Contains(err.Error(), "listening") {
		if second != nil {
			second.Close()
		}
		t.Errorf("over a live socket: err = %v, want a server is listening", err)
	}
	if c, err := net.Dial("unix", stale); err != nil {
		t.Errorf("the first listener lost its socket: %v", err)
	} else {
		c.Close()
	}
	ln.Close()

	// Any other file is left alone.
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ln, err := Listen("unix://" + file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("over a regular file: err = %v, want not a socket", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("regular file after Listen: %q, %v; want it untouched", b, err)
	}

	if _, err := Listen("unix://"); err == nil {
		t.Error("unix:// without a path: no error")
	}
	tcp, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp.Close()
}
