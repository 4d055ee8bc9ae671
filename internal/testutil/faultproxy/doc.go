// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server, for tests and the benchmark harness: added latency
// with jitter, a bandwidth cap, a blackhole, and connection resets.
//
// A [Proxy] listens on 127.0.0.1 on a free port and forwards every
// connection it accepts to one target address. The fault applied is changed
// at run time with [Proxy.Set] and takes effect for bytes read after the
// call. The model is a link, not a queue of requests: latency delays each
// chunk of bytes by the same amount, so pipelined traffic keeps flowing
// (a request sent while another is in flight is not held behind it), and
// bytes never overtake each other.
//
// It replaces nothing in production and is not meant to face untrusted
// peers: it binds loopback only.
package faultproxy
