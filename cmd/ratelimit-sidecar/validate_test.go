package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	good, bad := writeRules(t, goodRules(5)), writeRules(t, badRules)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"validate", "-config", good}, env(nil), &out, io.Discard); err != nil {
		t.Fatalf("validate good rules = %v", err)
	}
	if got := out.String(); got != "ok: 1 domain(s) edge from 1 file(s)\n" {
		t.Errorf("validate good rules printed %q", got)
	}
	out.Reset()
	if err := run(context.Background(), []string{"validate"}, env(map[string]string{"RLS_CONFIG": good}), &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "ok:") {
		t.Errorf("validate with RLS_CONFIG = %v, printed %q", err, out.String())
	}
	err := run(context.Background(), []string{"validate", "-config", bad}, env(nil), io.Discard, io.Discard)
	if err == nil {
		t.Fatal("validate bad rules = nil, want an error")
	}
	for _, line := range []string{":4: descriptors[0].rate_limit.unit", ":6: descriptors[1].rate_limt"} {
		if !strings.Contains(err.Error(), bad+line) {
			t.Errorf("validate bad rules = %q, want %q", err, bad+line)
		}
	}
	if err := run(context.Background(), []string{"validate"}, env(nil), io.Discard, io.Discard); err == nil {
		t.Error("validate without -config = nil, want an error")
	}
}
