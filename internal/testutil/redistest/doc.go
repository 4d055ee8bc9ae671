// Package redistest starts real Redis processes for tests: a single
// redis-server ([Start], [StartWith]), a Redis Cluster ([StartCluster]) and a
// Sentinel group with one master and one replica ([StartSentinel]). [Launch]
// starts a single redis-server for a program, the benchmark harness, that has
// no testing.TB.
//
// Every process binds 127.0.0.1 only, on a port found free just before it
// starts (retried on a bind race), runs with persistence off
// (--save "" --appendonly no) in its own temporary directory, and is killed in
// tb.Cleanup, also when the test fails. Each call starts its own processes and
// the package keeps no global state, so it is safe to use from parallel tests.
//
// The binaries are found on PATH with exec.LookPath. A missing binary fails the
// test instead of skipping it: on Debian, install them with
//
//	apt-get install redis-server redis-sentinel redis-tools
//
// Helpers that can fail call tb.Fatal (from the test goroutine only, like any
// testing.TB method that stops a test) and include the servers' logs in the
// message.
package redistest
