//go:build !race

package racetest

// Enabled is true when built with -race.
const Enabled = false
