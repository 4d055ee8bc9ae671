// Package local holds what the harness, the load generators and the fault runs
// need on loopback: an address, an HTTP GET, a connected gRPC client (Dial),
// SleepUntil and a process's CPU ticks. Free ports are internal/testutil/proctest's
// FreePorts.
package local

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
)

// Addr is "127.0.0.1:port".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Get returns the body of url, or an error for any status but 200.
func Get(ctx context.Context, url string) (string, error) {
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
