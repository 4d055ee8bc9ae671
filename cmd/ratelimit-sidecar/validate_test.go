package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
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

// TestValidateMergeDomains: validate merges files of one domain as the
// server does when asked, by flag or by either environment variable.
func TestValidateMergeDomains(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, key := range map[string]string{"a.yaml": "k", "b.yaml": "j"} {
		writeFileAt(t, dir, name, "domain: edge\ndescriptors:\n  - key: "+key+"\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		ok   bool
	}{
		{"refused by default", []string{"validate", "-config", dir}, nil, false},
		{"flag", []string{"validate", "-merge-domains", "-config", dir}, nil, true},
		{"RLS_MERGE_DOMAINS", []string{"validate", "-config", dir}, map[string]string{"RLS_MERGE_DOMAINS": "true"}, true},
		{"MERGE_DOMAIN_CONFIG", []string{"validate", "-config", dir}, map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, env(tt.env), &out, io.Discard)
			if (err == nil) != tt.ok {
				t.Fatalf("validate %v with %v = %v, want ok %v", tt.args, tt.env, err, tt.ok)
			}
			if tt.ok && out.String() != "ok: 1 domain(s) edge from 2 file(s)\n" {
				t.Errorf("validate printed %q", out.String())
			}
		})
	}
}

func writeFileAt(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
