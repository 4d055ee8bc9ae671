package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestGhzInputs: the data file holds the scenario's requests, in order, and the protoset resolves the method ghz
// is told to call.
func TestGhzInputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	msgs, err := buildMessages("three", "bench", 5)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data.json")
	if err := writeGhzData(data, msgs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != len(msgs) {
		t.Fatalf("data file: %d elements, %v; want %d", len(raw), err, len(msgs))
	}
	for i, r := range raw {
		var got rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(r, &got); err != nil || !proto.Equal(&got, msgs[i]) {
			t.Errorf("element %d = %v (%v), want %v", i, &got, err, msgs[i])
		}
	}

	set := filepath.Join(dir, "rls.protoset")
	if err := writeProtoset(set, rlsv3.File_envoy_service_ratelimit_v3_rls_proto); err != nil {
		t.Fatal(err)
	}
	if b, err = os.ReadFile(set); err != nil {
		t.Fatal(err)
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &fds); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&fds) // fails on any missing import
	if err != nil {
		t.Fatal(err)
	}
	if _, err := files.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit"); err != nil {
		t.Errorf("protoset lacks the method: %v", err)
	}
}

func TestParseGhz(t *testing.T) {
	t.Parallel()
	// Five calls, of which ghz kept the details of four (it keeps at most a million).
	const report = `{"count":5,"total":2000000000,
		"statusCodeDistribution":{"OK":4,"DeadlineExceeded":1},
		"errorDistribution":{"rpc error: code = DeadlineExceeded desc = context deadline exceeded":1},
		"details":[{"latency":1000000,"status":"OK"},{"latency":3000000,"status":"OK"},
		{"latency":2000000,"status":"OK"},{"latency":9000000,"status":"DeadlineExceeded"}]}`
	var got result.Load
	if err := parseGhz([]byte(report), &got, 3); err != nil {
		t.Fatal(err)
	}
	if got.Calls != 4 || got.Errors != 1 || got.MeasuredS != 2 || got.DecisionsPerS != 2 || got.DescriptorsPerS != 6 {
		t.Errorf("calls %d errors %d over %vs (%v/s, %v descriptors/s), want 4, 1, 2s, 2/s, 6/s",
			got.Calls, got.Errors, got.MeasuredS, got.DecisionsPerS, got.DescriptorsPerS)
	}
	if !strings.Contains(got.FirstError, "DeadlineExceeded") {
		t.Errorf("first error %q, want the failed call's", got.FirstError)
	}
	// The histogram never under-reports and is accurate to 1/128; the failed call is not timed.
	if got.P50Us < 2000 || got.P50Us > 2000*1.01 || got.MaxUs < 3000 || got.MaxUs > 3000*1.01 {
		t.Errorf("p50 %v µs, max %v µs; want 2000 and 3000", got.P50Us, got.MaxUs)
	}
	for _, bad := range []string{`{`, `{"count":0,"total":0,"details":[]}`, `{"count":5,"total":1,"details":[]}`} {
		if err := parseGhz([]byte(bad), &result.Load{}, 1); err == nil {
			t.Errorf("parseGhz(%s) = nil error", bad)
		}
	}
}
