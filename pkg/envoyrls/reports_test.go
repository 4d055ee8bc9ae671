package envoyrls

import (
	"fmt"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// checkDecodeReports decodes b with decodeReports into a report holding
// stale data and reports whether it did; when it did, proto must decode b
// to an equal report, and when it declined, the report must be untouched.
func checkDecodeReports(t testing.TB, b []byte) bool {
	t.Helper()
	stale := func() *rlqsv3.RateLimitQuotaUsageReports {
		return &rlqsv3.RateLimitQuotaUsageReports{Domain: "stale", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{NumRequestsAllowed: 9}}}
	}
	got := stale()
	if !decodeReports(b, got) {
		if !proto.Equal(got, stale()) {
			t.Fatalf("a report it declined was changed: %v", got)
		}
		return false
	}
	var want rlqsv3.RateLimitQuotaUsageReports
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatalf("decoded what proto refuses (%v): %x", err, b)
	}
	if !proto.Equal(got, &want) {
		t.Fatalf("decoded %v, proto decodes %v", got, &want)
	}
	return true
}

// usageReport is a report of domain with one usage per bucket, each
// allowed and denied as given and 5 s elapsed, as Envoy sends it.
func usageReport(domain string, buckets ...map[string]string) *rlqsv3.RateLimitQuotaUsageReports {
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: domain}
	for i, b := range buckets {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b},
			TimeElapsed:        &durationpb.Duration{Seconds: 5, Nanos: 1000 * int32(i)},
			NumRequestsAllowed: uint64(10 * i),
			NumRequestsDenied:  uint64(i % 3),
		})
	}
	return r
}

// oneEntryBuckets is n buckets of one entry each, all distinct.
func oneEntryBuckets(n int) []map[string]string {
	bs := make([]map[string]string, n)
	for i := range bs {
		bs[i] = map[string]string{"name": fmt.Sprint("bucket-", i)}
	}
	return bs
}

func TestDecodeReports(t *testing.T) {
	t.Parallel()
	tag := protowire.AppendTag
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(nil, num, protowire.BytesType), s)
	}
	msg := func(num protowire.Number, parts ...[]byte) []byte {
		var v []byte
		for _, p := range parts {
			v = append(v, p...)
		}
		return protowire.AppendBytes(tag(nil, num, protowire.BytesType), v)
	}
	varint := func(num protowire.Number, x uint64) []byte {
		return protowire.AppendVarint(tag(nil, num, protowire.VarintType), x)
	}
	// usage is a report of one usage of these fields; entry a bucket map
	// entry; id a bucket_id of these entries; elapsed a time_elapsed.
	usage := func(fields ...[]byte) []byte { return msg(2, fields...) }
	entry := func(k, v string) []byte { return msg(1, str(1, k), str(2, v)) }
	id := func(entries ...[]byte) []byte { return msg(1, entries...) }
	elapsed := func(fields ...[]byte) []byte { return msg(2, fields...) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name string
		wire []byte
		ok   bool // decodeReports decodes it (else proto does)
	}{
		{"empty", nil, true},
		{"domain only", str(1, "envoy"), true},
		{"one bucket", mustMarshal(t, usageReport("d", map[string]string{"name": "a", "path": "/x"})), true},
		{"500 buckets", mustMarshal(t, usageReport("d", oneEntryBuckets(500)...)), true},
		{"empty usage", usage(), true},
		{"empty bucket_id and elapsed", usage(id(), elapsed()), true},
		{"empty map entry", usage(id(msg(1))), true},
		{"value before key", usage(id(msg(1, str(2, "v"), str(1, "k")))), true},
		{"duplicate map keys (the last wins)", usage(id(entry("k", "a"), entry("j", "b"), entry("k", "c"))), true},
		{"fields out of order", usage(varint(4, 1), varint(3, 2), elapsed(varint(2, 3), varint(1, 4)), id(entry("k", "v"))), true},
		{"negative seconds and nanos", usage(elapsed(varint(1, ^uint64(0)), varint(2, ^uint64(0)))), true},
		{"most and least int32 nanos", cat(usage(elapsed(varint(2, 1<<31-1))), usage(elapsed(varint(2, uint64(1<<64-1<<31))))), true},
		{"counts at uint64's end", usage(varint(3, 1<<64-1), varint(4, 1<<64-1)), true},
		{"overlong varint", usage(append(tag(nil, 3, protowire.VarintType), 0x85, 0x80, 0x00)), true},
		{"domain after usages", cat(usage(varint(3, 1)), str(1, "d")), true},
		// Declined: proto decodes these (or refuses them) itself.
		{"domain twice (proto keeps the last)", cat(str(1, "a"), str(1, "b")), false},
		{"bucket_id twice (proto merges)", usage(id(entry("a", "1")), id(entry("b", "2"))), false},
		{"time_elapsed twice", usage(elapsed(varint(1, 1)), elapsed(varint(2, 2))), false},
		{"allowed twice", usage(varint(3, 1), varint(3, 2)), false},
		{"denied twice", usage(varint(4, 1), varint(4, 2)), false},
		{"seconds twice", usage(elapsed(varint(1, 1), varint(1, 2))), false},
		{"nanos twice", usage(elapsed(varint(2, 1), varint(2, 2))), false},
		{"nanos past int32 (proto truncates)", usage(elapsed(varint(2, 1<<31))), false},
		{"key twice in an entry", usage(id(msg(1, str(1, "a"), str(1, "b")))), false},
		{"invalid UTF-8 domain", str(1, "\xff"), false},
		{"invalid UTF-8 key", usage(id(entry("caf\xe9", "v"))), false},
		{"invalid UTF-8 value", usage(id(entry("k", "caf\xe9"))), false},
		{"unknown report field", varint(9, 1), false},
		{"unknown usage field", usage(varint(9, 1)), false},
		{"unknown bucket_id field", usage(id(str(2, "x"))), false},
		{"unknown entry field", usage(id(msg(1, str(1, "k"), str(3, "x")))), false},
		{"unknown duration field", usage(elapsed(varint(3, 1))), false},
		{"domain as varint", varint(1, 1), false},
		{"usages as varint", varint(2, 1), false},
		{"allowed as bytes", usage(str(3, "x")), false},
		{"bucket_id as varint", usage(varint(1, 1)), false},
		{"seconds as fixed64", usage(elapsed(protowire.AppendFixed64(tag(nil, 1, protowire.Fixed64Type), 1))), false},
		{"entry key as varint", usage(id(msg(1, varint(1, 1)))), false},
		{"truncated", []byte{0x0a, 0x05, 'x'}, false},
		{"truncated usage", []byte{0x12, 0x80}, false},
		{"truncated inside a usage", usage([]byte{0x0a, 0x05}), false},
		{"bad tag", []byte{0x00}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkDecodeReports(t, tt.wire); got != tt.ok {
				t.Errorf("decodeReports took it: %v, want %v", got, tt.ok)
			}
			// Whoever decodes it, Codec answers as proto (TestCodecMapsInvalidUTF8InReports covers the mapped UTF-8).
			checkCodecAsProto(t, tt.wire, &rlqsv3.RateLimitQuotaUsageReports{}, &rlqsv3.RateLimitQuotaUsageReports{}, fixReports)
		})
	}
}

// TestDecodeReportsKeepsUsagesApart: the usages share arrays, so a change
// to one usage's bucket id, elapsed time or place in the list must not
// reach another's.
func TestDecodeReportsKeepsUsagesApart(t *testing.T) {
	t.Parallel()
	var r rlqsv3.RateLimitQuotaUsageReports
	if !decodeReports(mustMarshal(t, usageReport("d", oneEntryBuckets(3)...)), &r) {
		t.Fatal("declined")
	}
	u0, u1 := r.BucketQuotaUsages[0], r.BucketQuotaUsages[1]
	u0.BucketId.Bucket["name"] = "changed"
	u0.TimeElapsed.Seconds = 99
	u0.NumRequestsAllowed = 99
	if !proto.Equal(u1, usageReport("d", oneEntryBuckets(3)...).BucketQuotaUsages[1]) {
		t.Errorf("the second usage became %v", u1)
	}
}

// FuzzDecodeReports: any bytes: no panic; whatever decodeReports takes
// proto takes too and decodes to the same report; whatever proto refuses,
// decodeReports declines (checkDecodeReports checks both).
func FuzzDecodeReports(f *testing.F) {
	f.Add(mustMarshal(f, usageReport("envoy", map[string]string{"name": "a", "path": "/x"})))
	f.Add(mustMarshal(f, usageReport("envoy", oneEntryBuckets(4)...)))
	f.Add(mustMarshal(f, usageReport("", map[string]string{}, nil)))
	f.Add(mustMarshal(f, &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		TimeElapsed: &durationpb.Duration{Seconds: -1, Nanos: -999999999},
	}}}))
	f.Add([]byte{0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0x0a, 0x00}) // one bucket of an empty entry
	f.Add([]byte{0x0a, 0x05, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeReports(t, b)
	})
}
