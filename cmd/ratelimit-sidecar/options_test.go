package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseOptionsEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the redis URL parsed
		wantErr string
	}{
		{"flag beats env", []string{"-config", "r.yaml", "-redis-url", "redis://flag:6379"}, map[string]string{"RLS_REDIS_URL": "redis://env:6379"}, "redis://flag:6379", ""},
		{"env when no flag", []string{"-config", "r.yaml"}, map[string]string{"RLS_REDIS_URL": "redis://env:6379"}, "redis://env:6379", ""},
		{"config from env", nil, map[string]string{"RLS_CONFIG": "r.yaml"}, "", ""},
		{"no config", nil, nil, "", "-config (or RLS_CONFIG) is required"},
		{"bad env value", []string{"-config", "r.yaml"}, map[string]string{"RLS_REDIS_TIMEOUT": "soon"}, "", `RLS_REDIS_TIMEOUT="soon"`},
		{"bad env value hidden by flag", []string{"-config", "r.yaml", "-redis-timeout", "5ms"}, map[string]string{"RLS_REDIS_TIMEOUT": "soon"}, "", ""},
		{"unknown flag", []string{"-config", "r.yaml", "-no-such-flag"}, nil, "", "flag provided but not defined: -no-such-flag"},
		{"stray argument", []string{"-config", "r.yaml", "serve"}, nil, "", `unexpected arguments ["serve"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseOptions("test", tt.args, env(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseOptions(%q) error = %v, want %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOptions(%q) = %v", tt.args, err)
			}
			if cfg.redisURL != tt.want {
				t.Errorf("parseOptions(%q).redisURL = %q, want %q", tt.args, cfg.redisURL, tt.want)
			}
		})
	}
}
