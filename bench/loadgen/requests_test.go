package main

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

func TestScanResponse(t *testing.T) {
	t.Parallel()
	ok := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 7}
	over := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
	tests := []struct {
		name string
		resp *rlsv3.RateLimitResponse
		want response
	}{
		{"empty is unknown", &rlsv3.RateLimitResponse{}, response{}},
		{"ok one", &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{ok}}, response{code: codeOK, statuses: 1}},
		{"over three with body", &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{ok, over, ok}, RawBody: []byte("slow down")},
			response{code: codeOverLimit, statuses: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := proto.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			var got response
			got.code = 99 // scanResponse must reset what a previous call left
			if err := scanResponse(b, &got); err != nil {
				t.Fatalf("scanResponse() error %v", err)
			}
			if got != tt.want {
				t.Errorf("scanResponse() = %+v, want %+v", got, tt.want)
			}
		})
	}
	if err := scanResponse([]byte{0x08}, &response{}); err == nil {
		t.Errorf("scanResponse(truncated varint) = nil error, want an error")
	}
}

func TestBuildRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario    string
		keys        int
		wantMsgs    int
		descriptors int
		distinct    int // distinct request payloads
	}{
		{"allowed", 100, 100, 1, 100},
		{"hot", 100, 1, 1, 1},
		{"three", 20, 20, 3, 20},
		{"hotthree", 20, 20, 3, 20},
		{"distinct", 500, 500, 1, 500},
		{"hotallowed", 100, 100, 1, 60}, // h0-h9 and the 50 odd k<i>
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			t.Parallel()
			r, err := buildRequests(tt.scenario, "bench", tt.keys)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.msgs) != tt.wantMsgs || r.descriptors != tt.descriptors {
				t.Fatalf("buildRequests(%q, %d): %d msgs of %d descriptors, want %d of %d",
					tt.scenario, tt.keys, len(r.msgs), r.descriptors, tt.wantMsgs, tt.descriptors)
			}
			seen := map[string]bool{}
			for i, m := range r.msgs {
				var req rlsv3.RateLimitRequest
				if err := proto.Unmarshal(m.wire.Materialize(), &req); err != nil {
					t.Fatalf("msg %d does not decode: %v", i, err)
				}
				if req.Domain != "bench" || len(req.Descriptors) != tt.descriptors || req.HitsAddend != 1 {
					t.Fatalf("msg %d = %v, want domain bench, %d descriptors, hits_addend 1", i, &req, tt.descriptors)
				}
				seen[string(m.wire.Materialize())] = true
			}
			if len(seen) != tt.distinct {
				t.Errorf("%d distinct payloads, want %d", len(seen), tt.distinct)
			}
		})
	}
}
