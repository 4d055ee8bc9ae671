// Package metrics exports the service's Prometheus metrics: decisions and
// store calls (as an envoyrls.Observer), rules reloads, and optional store
// collectors such as Redis round trips and connection pool statistics.
package metrics
