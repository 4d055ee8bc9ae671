package main

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// httpServers are the HTTP servers of one run: the endpoints and pprof.
// stop shuts them down and waits for their Serve calls, so their listeners
// are closed when it returns.
type httpServers struct {
	srvs    []*http.Server
	serving sync.WaitGroup
}

// serve serves h on lis until stop.
func (s *httpServers) serve(lis net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	s.srvs = append(s.srvs, srv)
	s.serving.Go(func() { srv.Serve(lis) })
}

// stop shuts the servers down, each within a second; a second call does
// nothing.
func (s *httpServers) stop() {
	for _, srv := range s.srvs {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if srv.Shutdown(sctx) != nil {
			srv.Close() // a connection still busy, such as a pprof profile
		}
		cancel()
	}
	s.srvs = nil
	s.serving.Wait()
}

// debugHandler serves Go's net/http/pprof profiles under /debug/pprof/ and
// rlconfig at /rlconfig, as the reference's debug port does.
func debugHandler(rlconfig http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /rlconfig", rlconfig)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
