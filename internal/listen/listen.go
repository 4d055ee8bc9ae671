// Package listen opens the listeners of the sidecar and of the bench no-op
// server from one address syntax: host:port, or unix:///path.
package listen

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
)

// Listen opens addr: a TCP host:port, or a unix socket for unix:///path. A
// socket file left at path by a process that died (nothing accepts on it)
// is replaced; a socket something still serves on, or that cannot be
// dialled for another reason than a refusal, is an error, as a busy
// port would be, so a second sidecar cannot take over the first one's
// address; any other file there is an error, never removed, so a mistyped
// path cannot delete a file.
func Listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if path == "" {
		return nil, errors.New("unix:// address without a path")
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: a server is listening on it", path)
		}
		// Only a refused connection means nobody accepts there: a live
		// server can also fail a dial (a full backlog, another user's
		// socket), and its socket must stay.
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: cannot tell whether a server listens on it: %w", path, err)
		}
		// Left by a process that died: Listen would fail with "address
		// already in use".
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	return net.Listen("unix", path)
}
