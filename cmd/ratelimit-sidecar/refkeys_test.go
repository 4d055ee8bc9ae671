package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestReferenceKeysOptions: -reference-keys reaches the server only with
// Redis, and its start line says which limits keep this project's keys.
func TestReferenceKeysOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		c       refKeysConfig
		redis   bool
		on      bool
		logWant string // in the one log line; "" for none
	}{
		{"off", refKeysConfig{jitter: time.Minute}, true, false, ""},
		{"redis", refKeysConfig{enabled: true, prefix: "p:", jitter: time.Minute}, true, true, "keep this project's keys and are not shared"},
		{"memory", refKeysConfig{enabled: true}, false, false, "not used with the in-memory store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.InfoLevel)
			got := tc.c.options(tc.redis, zap.New(core))
			if (got != nil) != tc.on {
				t.Fatalf("options = %+v, want on %v", got, tc.on)
			}
			if got != nil && (got.Prefix != tc.c.prefix || got.JitterMax != tc.c.jitter) {
				t.Errorf("options = %+v, want prefix %q, jitter %v", got, tc.c.prefix, tc.c.jitter)
			}
			entries := logs.All()
			if tc.logWant == "" {
				if len(entries) != 0 {
					t.Errorf("logged %d lines, want none", len(entries))
				}
				return
			}
			if len(entries) != 1 || !strings.Contains(entries[0].Message, tc.logWant) {
				t.Errorf("logged %v, want one line with %q", entries, tc.logWant)
			}
		})
	}
}
