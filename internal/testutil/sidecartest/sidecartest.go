// Package sidecartest holds what the command's tests and the end-to-end
// tests both need to watch a ratelimit-sidecar run: a buffer for its log, a
// reader of its "serving" log line, and a directory for unix sockets.
package sidecartest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
)

// SocketDir returns a new directory for unix sockets, removed when tb ends.
// It is made directly under the system's temporary directory, because a
// socket path must fit in about 100 bytes and tb.TempDir's paths, which hold
// the test's name, can be longer.
func SocketDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		tb.Fatalf("socket dir: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Buffer is a bytes.Buffer for a sidecar's output, safe for concurrent use:
// a process's stdout and stderr, or a logger, write while the test reads.
// The zero value is an empty buffer.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ServingAddrs finds the JSON log line {"msg":"serving",...} that the
// sidecar writes once it listens, and returns its grpc_addr and http_addr
// (empty without -http-addr). ok is false while there is no such line.
func ServingAddrs(log string) (grpcAddr, httpAddr string, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			HTTPAddr string `json:"http_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
			return line.GRPCAddr, line.HTTPAddr, true
		}
	}
	return "", "", false
}
