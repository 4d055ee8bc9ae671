package main

import (
	"context"
	"flag"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// aiGatewayArgs are the arguments of AI Gateway v1.1's only published
// Deployment of the rate limit service
// (tests/e2e/testdata/backend_quota_ratelimit.yaml), which starts
// /bin/ratelimit with them.
var aiGatewayArgs = []string{"--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"}

func TestSplitForeign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args          []string
		ours, foreign []string
	}{
		{nil, nil, nil},
		{aiGatewayArgs, nil, aiGatewayArgs},
		{[]string{"-quota-mode", "--quotaRateLimitServiceAddr", "x", "-log-level", "debug"},
			[]string{"-quota-mode", "-log-level", "debug"}, []string{"--quotaRateLimitServiceAddr", "x"}},
		{[]string{"--log-level=warn", "-unknown=1", "-shadow-mode=false", "pos"},
			[]string{"--log-level=warn", "-shadow-mode=false"}, []string{"-unknown=1", "pos"}},
		// A value that looks like a flag is still the value of a flag that takes one.
		{[]string{"-key-prefix", "-quota-mode"}, []string{"-key-prefix", "-quota-mode"}, nil},
		{[]string{"-quota-mode", "--", "-log-level", "x"}, []string{"-quota-mode"}, []string{"--", "-log-level", "x"}},
		{[]string{"-", "---x", "-=v"}, nil, []string{"-", "---x", "-=v"}},
		{[]string{"-log-level"}, []string{"-log-level"}, nil}, // flag reports the missing value
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		(&options{}).addFlags(fs)
		ours, foreign := splitForeign(fs, tt.args)
		if !slices.Equal(ours, tt.ours) || !slices.Equal(foreign, tt.foreign) {
			t.Errorf("splitForeign(%q) = %q, %q; want %q, %q", tt.args, ours, foreign, tt.ours, tt.foreign)
		}
	}
}

// FuzzSplitForeign: every argument lands on one side, in its order, and
// the flags kept never make package flag report an undefined one.
func FuzzSplitForeign(f *testing.F) {
	f.Add("--quotaRateLimitServiceAddr=x -quota-mode -log-level debug pos -- -x")
	f.Add("-key-prefix -quota-mode -unknown")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		(&options{}).addFlags(fs)
		ours, foreign := splitForeign(fs, args)
		if len(ours)+len(foreign) != len(args) {
			t.Fatalf("splitForeign(%q) = %q, %q: arguments lost", args, ours, foreign)
		}
		if !isSubsequence(ours, args) || !isSubsequence(foreign, args) {
			t.Fatalf("splitForeign(%q) = %q, %q: order changed", args, ours, foreign)
		}
		if err := fs.Parse(ours); err != nil && strings.Contains(err.Error(), "not defined") {
			t.Fatalf("Parse(%q): %v", ours, err)
		}
	})
}

// ask sends one request of descriptors ds and fails the test on an error.
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	return resp
}

func isSubsequence(sub, of []string) bool {
	i := 0
	for _, a := range of {
		if i < len(sub) && sub[i] == a {
			i++
		}
	}
	return i == len(sub)
}

// TestCommandLineUnderReferenceName starts the built binary as AI Gateway's
// Deployment does: /bin/ratelimit with an argument envoyproxy/ratelimit
// ignores. It serves, honours the flags it defines, and logs the rest once.
// Started under its own name, the same argument is an error.
func TestCommandLineUnderReferenceName(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	root, _ := runtimeRoot(t)
	vars := refEnv(map[string]string{"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr,
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit"})
	args := append(slices.Clone(aiGatewayArgs), "-log-level", "debug", "stray")
	p := startAs(t, "/bin/ratelimit", args, vars)
	if n := p.log.count("arguments ignored: started as ratelimit, which ignores its command line"); n != 1 {
		t.Errorf("%d log lines of ignored arguments, want 1; log:\n%s", n, p.log)
	}
	if log := p.log.String(); !strings.Contains(log, `"args":["--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system","stray"]`) ||
		!strings.Contains(log, `"level":"debug"`) {
		t.Errorf("log lacks the ignored arguments or the debug lines -log-level asked for:\n%s", log)
	}

	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpcAddr))
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, c, "rl", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "argv"}}}).OverallCode; got != want {
			t.Errorf("request %d: %v, want %v", i+1, got, want)
		}
	}

	for _, argv0 := range []string{"", "ratelimit-sidecar", "/usr/local/bin/ratelimit-sidecar"} {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		cmd := exec.CommandContext(ctx, binary(t), aiGatewayArgs...)
		if argv0 != "" {
			cmd.Args[0] = argv0
		}
		for k, v := range vars {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		if _, exited := err.(*exec.ExitError); !exited || !strings.Contains(string(out), "flag provided but not defined: -quotaRateLimitServiceAddr") {
			t.Errorf("started as %q: %v after %v, want exit status 1 naming the flag; output:\n%s", argv0, err, time.Since(start), out)
		}
	}
}
