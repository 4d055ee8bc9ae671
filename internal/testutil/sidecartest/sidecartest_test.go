package sidecartest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestServingAddrs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, log  string
		grpc, http string
		ok         bool
	}{
		{"empty", "", "", "", false},
		{"not yet", `{"level":"info","msg":"rules loaded"}` + "\n", "", "", false},
		{"serving", "not json\n" + `{"msg":"rules loaded"}` + "\n" +
			`{"level":"info","msg":"serving","grpc_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2","redis":false}` + "\n", "127.0.0.1:1", "127.0.0.1:2", true},
		{"no http", `{"msg":"serving","grpc_addr":"/tmp/s.sock","http_addr":""}`, "/tmp/s.sock", "", true},
		{"console format", "2025-01-01T00:00:00.000Z\tINFO\tserving\t{\"grpc_addr\": \"127.0.0.1:1\"}\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, h, ok := ServingAddrs(tt.log)
			if g != tt.grpc || h != tt.http || ok != tt.ok {
				t.Errorf("ServingAddrs(%q) = %q, %q, %v, want %q, %q, %v", tt.log, g, h, ok, tt.grpc, tt.http, tt.ok)
			}
		})
	}
}

func TestBufferConcurrent(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "%d %d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "\n"); got != 400 {
		t.Errorf("%d lines, want 400", got)
	}
}
