// Package accuracy measures how far pkg/window's algorithms admit beyond their limit: its test replays traffic
// patterns through window.Memory and an exact sliding log, asserts bounds on the worst over-admission, and with
// -write-docs writes the table into docs/algorithms.md and the chart (gonum/plot) to docs/algorithms.png. It
// lives in the benchmark module so that the service's module does not require the charting library.
package accuracy
