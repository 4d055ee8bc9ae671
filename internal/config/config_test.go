package config

import "testing"

func TestEnvName(t *testing.T) {
	t.Parallel()
	for flag, want := range map[string]string{
		"config":                         "RLS_CONFIG",
		"redis-url":                      "RLS_REDIS_URL",
		"redis-tls-insecure-skip-verify": "RLS_REDIS_TLS_INSECURE_SKIP_VERIFY",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}
