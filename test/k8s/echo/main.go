// Command echo stands in for traefik/whoami (deploy/k8s's demo app) in the local images the real-cluster
// tests build, since no image registry is reachable there. It takes whoami's flag as the manifest passes it
// (--port), answers GET /health with 200 and every other request with the request it saw: method, URL,
// remote address and headers, as text. Like whoami it does nothing on SIGTERM but exit, so the manifest's
// preStop sleep is what keeps it serving while Envoy drains.
package main

import (
	"flag"
	"fmt"
	"log"
	"maps"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	port := flag.Int("port", 80, "port to listen on")
	flag.Parse()
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "Hostname: %s\nRemoteAddr: %s\n%s %s %s\n", host, r.RemoteAddr, r.Method, r.URL.RequestURI(), r.Proto)
		for _, k := range slices.Sorted(maps.Keys(r.Header)) {
			for _, v := range r.Header[k] {
				fmt.Fprintf(w, "%s: %s\n", k, v)
			}
		}
	})
	srv := &http.Server{Addr: fmt.Sprintf(":%d", *port), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
