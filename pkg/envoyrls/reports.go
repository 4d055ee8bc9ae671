package envoyrls

import (
	"math"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The RLQS usage report's own decoder, as decodeRequest (wire.go) is the
// RateLimitRequest's: every Envoy reports each of its buckets every few
// seconds, and proto's generic decoding of those reports was a tenth of the
// sidecar's CPU under the bench fleet. go-control-plane generates no
// decoder for them, so decodeReports is written by hand for the shape Envoy
// sends; anything else goes to proto (reports_test.go holds it to proto).

// The report's roles, beside the request's (wireRole in wire.go).
const (
	wireReportDomain wireRole = iota + wireValue + 1
	wireUsage
	wireBucketID
	wireElapsed
	wireAllowed
	wireDenied
	wireBucket
	wireSeconds
	wireNanos
)

// The fields of the messages the report decoder reads, every field of each,
// handled or declined: RateLimitQuotaUsageReports, its BucketQuotaUsage,
// BucketId (whose bucket map's entries are read with wireEntryFields, key 1
// and value 2, as a map entry is on the wire) and the Duration of
// time_elapsed. TestReportFieldsMatchProto fails on a field missing here.
var (
	wireReportsFields = wireFields{
		{1, "domain", wireReportDomain},
		{2, "bucket_quota_usages", wireUsage},
	}
	wireUsageFields = wireFields{
		{1, "bucket_id", wireBucketID},
		{2, "time_elapsed", wireElapsed},
		{3, "num_requests_allowed", wireAllowed},
		{4, "num_requests_denied", wireDenied},
	}
	wireBucketIDFields = wireFields{
		{1, "bucket", wireBucket},
	}
	wireDurationFields = wireFields{
		{1, "seconds", wireSeconds},
		{2, "nanos", wireNanos},
	}
)

// decodeReports decodes b into r, which it resets first, as proto.Unmarshal
// would, and reports true, when b holds only what Envoy sends: a domain and
// usages of a bucket_id (its bucket map), a time_elapsed (seconds, nanos),
// num_requests_allowed and num_requests_denied, each singular field at most
// once in its message (proto would keep the last, or merge messages), every
// string valid UTF-8 and every nanos an int32. Otherwise it reports false
// and leaves r untouched, for proto. A bucket map's entries with the same
// key keep the last value, as proto's do.
//
// It reads b twice, once to check and count and once to fill, and
// allocates, whatever the report's size, one string holding all of b, of
// which every string field is a part, one array each of usages, bucket ids
// and durations, the usages' pointer slice, and then one map per bucket id.
// So whoever keeps any part of the result keeps those: pkg/rlqs keeps the
// BucketId of a bucket's first report on its stream, and with it that
// report's bytes and its arrays of bucket ids (with their maps), usages and
// durations, until the stream forgets every bucket first seen in it — at
// most one report's worth per report that brought new buckets.
func decodeReports(b []byte, r *rlqsv3.RateLimitQuotaUsageReports) bool {
	var n reportsFill
	if !n.reports(b, 0) {
		return false
	}
	f := reportsFill{
		s:       string(b),
		usages:  make([]rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, n.nu),
		ids:     make([]rlqsv3.BucketId, n.nid),
		elapsed: make([]durationpb.Duration, n.nel),
		fill:    r,
	}
	r.Reset()
	if n.nu > 0 {
		r.BucketQuotaUsages = make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, n.nu)
	}
	f.reports(b, 0)
	return true
}

// reportsFill is one reading of a report. Without fill, it checks the
// report and counts its messages; with fill, it decodes the report it
// checked into fill, taking each message from its array.
type reportsFill struct {
	nu, nid, nel int // usages, bucket ids and durations read so far
	s            string
	usages       []rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	ids          []rlqsv3.BucketId
	elapsed      []durationpb.Duration
	fill         *rlqsv3.RateLimitQuotaUsageReports
}

// str is the string at sp, from the report's one string.
func (f *reportsFill) str(sp span) string { return f.s[sp.off : sp.off+sp.n] }

// reports reads a report's bytes b, which start at base (fields at the top
// level, as each method below reads its message's).
func (f *reportsFill) reports(b []byte, base int) bool {
	var domain bool
	for pos := 0; pos < len(b); {
		num, typ, v, _, n := field(b[pos:])
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		pos += n
		switch wireReportsFields.role(num) {
		case wireReportDomain:
			sp, ok := text(v, base+pos)
			if !ok || domain {
				return false
			}
			domain = true
			if f.fill != nil {
				f.fill.Domain = f.str(sp)
			}
		case wireUsage:
			if !f.usage(v, base+pos-len(v)) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// usage reads a BucketQuotaUsage's bytes b, which start at base.
func (f *reportsFill) usage(b []byte, base int) bool {
	var u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	if f.fill != nil {
		u = &f.usages[f.nu]
		f.fill.BucketQuotaUsages[f.nu] = u
	}
	f.nu++
	var seen [wireDenied + 1]bool
	for pos := 0; pos < len(b); {
		num, typ, v, x, n := field(b[pos:])
		if n < 0 {
			return false
		}
		pos += n
		role := wireUsageFields.role(num)
		if role == wireDecline || seen[role] {
			return false
		}
		seen[role] = true
		switch {
		case role == wireBucketID && typ == protowire.BytesType:
			if !f.bucketID(v, base+pos-len(v), u) {
				return false
			}
		case role == wireElapsed && typ == protowire.BytesType:
			if !f.duration(v, u) {
				return false
			}
		case role == wireAllowed && typ == protowire.VarintType:
			if u != nil {
				u.NumRequestsAllowed = x
			}
		case role == wireDenied && typ == protowire.VarintType:
			if u != nil {
				u.NumRequestsDenied = x
			}
		default:
			return false
		}
	}
	return true
}

// bucketID reads a BucketId's bytes b, which start at base, into u's.
func (f *reportsFill) bucketID(b []byte, base int, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) bool {
	var id *rlqsv3.BucketId
	if u != nil {
		id = &f.ids[f.nid]
		u.BucketId = id
	}
	f.nid++
	for pos := 0; pos < len(b); {
		num, typ, v, _, n := field(b[pos:])
		if n < 0 || typ != protowire.BytesType || wireBucketIDFields.role(num) != wireBucket {
			return false
		}
		pos += n
		k, val, ok := readEntry(v, base+pos-len(v), id == nil)
		if !ok {
			return false
		}
		if id != nil {
			if id.Bucket == nil {
				// Envoy's buckets hold a few entries, fewer than fill a
				// map's first group, so there is no size to give.
				id.Bucket = make(map[string]string)
			}
			id.Bucket[f.str(k)] = f.str(val)
		}
	}
	return true
}

// duration reads a Duration's bytes b into u's time_elapsed.
func (f *reportsFill) duration(b []byte, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) bool {
	var d *durationpb.Duration
	if u != nil {
		d = &f.elapsed[f.nel]
		u.TimeElapsed = d
	}
	f.nel++
	var seconds, nanos bool
	for pos := 0; pos < len(b); {
		num, typ, _, x, n := field(b[pos:])
		if n < 0 || typ != protowire.VarintType {
			return false
		}
		pos += n
		switch role := wireDurationFields.role(num); {
		case role == wireSeconds && !seconds:
			seconds = true
			if d != nil {
				d.Seconds = int64(x)
			}
		// An int32 is sent sign-extended to 64 bits; proto truncates
		// anything else, which is not Envoy's.
		case role == wireNanos && !nanos && int64(x) >= math.MinInt32 && int64(x) <= math.MaxInt32:
			nanos = true
			if d != nil {
				d.Nanos = int32(x)
			}
		default:
			return false
		}
	}
	return true
}
