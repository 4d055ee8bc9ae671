// Command ratelimit-sidecar serves Envoy's rate limit service over gRPC,
// with fixed- or sliding-window counters in Redis or in memory.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	if os.Getenv("GOGC") == "" {
		// The heap is small (tens of MiB) and churns per request, so at
		// the default GOGC=100 the collector runs constantly and costs CPU
		// per decision (README, Benchmarks). Set GOMEMLIMIT near the
		// container's limit to keep GC from letting the heap grow into it
		// (deploy/k8s does).
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runAs(ctx, os.Args[0], os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit-sidecar:", err)
		os.Exit(1)
	}
}
