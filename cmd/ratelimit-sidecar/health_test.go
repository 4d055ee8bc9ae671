package main

import "testing"

// TestReadinessEndsWithDraining: once draining is closed, no later success
// of the health loop makes the sidecar ready again.
func TestReadinessEndsWithDraining(t *testing.T) {
	t.Parallel()
	draining := make(chan struct{})
	r := &readiness{draining: draining}
	r.rules.Store(true)
	if r.Ready() {
		t.Fatal("Ready() before any ping = true, want false")
	}
	if !r.set(true) || !r.Ready() {
		t.Fatal("after set(true): Ready() = false, want true")
	}
	close(draining)
	if r.Ready() {
		t.Error("Ready() while draining = true, want false")
	}
	r.set(false)
	r.set(true) // a ping in flight when draining began
	if r.Ready() {
		t.Error("Ready() after a ping succeeded while draining = true, want false")
	}
}
