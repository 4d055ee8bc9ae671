//go:build race

// Package racetest tells tests whether they were built with the race detector,
// so the binaries they build and run as child processes can be built the
// same way, and the whole suite stays race-checked.
package racetest

// Enabled is true when built with -race.
const Enabled = true
