// Package metrics exports the service's Prometheus metrics: decisions and
// store calls (as an envoyrls.Observer), rules reloads, and optional store
// collectors such as Redis round trips and connection pool statistics;
// and, beside them, envoyproxy/ratelimit's per-limit and error metrics
// under the names and labels its Prometheus mapper gives them, so that
// dashboards built for it keep working.
package metrics
