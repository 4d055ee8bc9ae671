// Package httpapi serves the command's HTTP endpoints: liveness (/healthz),
// readiness (/readyz), the rules being served with their reload status
// (/rules) and Prometheus metrics (/metrics).
package httpapi
