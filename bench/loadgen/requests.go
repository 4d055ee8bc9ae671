package main

import (
	"fmt"
	"slices"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// scenarios maps a -scenario name to the descriptors of request i of n prebuilt ones (n is -keys).
var scenarios = map[string]func(i int) [][]entry{
	// allowed: one single-entry descriptor spread over -keys values, every one far under its limit.
	"allowed": func(i int) [][]entry { return [][]entry{{{"api_key", key(i)}}} },
	// hot: every request hits the same value, which the bench rules limit to 10 per hour.
	"hot": func(int) [][]entry { return [][]entry{{{"api_key", "hot"}}} },
	// three: what a typical Envoy route sends: per key, per client address, per key and path.
	"three": func(i int) [][]entry {
		return [][]entry{
			{{"api_key", key(i)}},
			{{"remote_address", ip(i)}},
			{{"api_key", key(i)}, {"path", fmt.Sprintf("/p%d", i%10)}},
		}
	},
	// hotthree: three descriptors of which one, api_key=hot, is over its limit and the others have room: the
	// request is denied, and the over-limit cache must still report the others truthfully.
	"hotthree": func(i int) [][]entry {
		return [][]entry{
			{{"api_key", key(i)}},
			{{"remote_address", ip(i)}},
			{{"api_key", "hot"}},
		}
	},
	// hotallowed: every other request hits one of 10 values with room under their limit (a few busy tenants
	// whose calls land in the same batch), the others spread over the odd values of k<i>.
	"hotallowed": func(i int) [][]entry {
		if i%2 == 0 {
			return [][]entry{{{"api_key", fmt.Sprintf("h%d", i/2%hotAllowedKeys)}}}
		}
		return [][]entry{{{"api_key", key(i)}}}
	},
	// distinct: a value that does not repeat until -keys requests have gone by, so every call creates state.
	"distinct": func(i int) [][]entry { return [][]entry{{{"api_key", fmt.Sprintf("d%d", i)}}} },
	// tenants: as distinct, but for descriptor key tenant, which the bench rules count in hour-long windows, so
	// every value's counter stays live in Redis for the run: -keys of them once each value has been sent.
	"tenants": func(i int) [][]entry { return [][]entry{{{"tenant", fmt.Sprintf("t%d", i)}}} },
}

var scenarioNames = func() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}()

// hotAllowedKeys is how many values take half of scenario hotallowed's requests.
const hotAllowedKeys = 10

type entry struct{ key, value string }

func key(i int) string { return fmt.Sprintf("k%d", i) }

// ip turns i into a distinct IPv4 address string: only a descriptor value, nothing is sent to it.
func ip(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff) }

// requests are the marshalled messages a run cycles through. Call i of the run sends msgs[i % len(msgs)].
type requests struct {
	msgs        []request
	descriptors int // per request, the same for all
}

// request is a RateLimitRequest already in wire format; rawCodec sends it as is.
type request struct{ wire mem.BufferSlice }

func buildRequests(scenario, domain string, keys int) (*requests, error) {
	msgs, err := buildMessages(scenario, domain, keys)
	if err != nil {
		return nil, err
	}
	r := &requests{msgs: make([]request, len(msgs))}
	for i, msg := range msgs {
		b, err := proto.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("marshal request %d: %w", i, err)
		}
		r.msgs[i] = request{wire: mem.BufferSlice{mem.SliceBuffer(b)}}
		r.descriptors = len(msg.Descriptors)
	}
	return r, nil
}

// buildMessages returns the requests of a scenario: -keys of them, or one for hot.
func buildMessages(scenario, domain string, keys int) ([]*rlsv3.RateLimitRequest, error) {
	shape, ok := scenarios[scenario]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q", scenario)
	}
	n := keys
	if scenario == "hot" {
		n = 1
	}
	msgs := make([]*rlsv3.RateLimitRequest, n)
	for i := range n {
		msg := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1}
		for _, d := range shape(i) {
			pd := &commonv3.RateLimitDescriptor{}
			for _, e := range d {
				pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.key, Value: e.value})
			}
			msg.Descriptors = append(msg.Descriptors, pd)
		}
		msgs[i] = msg
	}
	return msgs, nil
}

// RateLimitResponse overall codes (envoy.service.ratelimit.v3.RateLimitResponse.Code).
const (
	codeOK        = int32(rlsv3.RateLimitResponse_OK)
	codeOverLimit = int32(rlsv3.RateLimitResponse_OVER_LIMIT)
)

// response keeps what the generator reports of a RateLimitResponse.
type response struct {
	code     int32 // overall_code, field 1
	statuses int   // number of statuses, field 2
}

// rawCodec sends prebuilt request bytes and scans responses without decoding them into messages: the server
// still sees ordinary protobuf, and the generator spends its CPU on little but the calls.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*request)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return r.wire, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*response)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	return scanResponse(b, r)
}

// scanResponse reads overall_code and counts statuses from a wire-format RateLimitResponse.
func scanResponse(b []byte, r *response) error {
	*r = response{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("rawCodec: bad response tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("rawCodec: bad overall_code: %w", protowire.ParseError(n))
			}
			r.code = int32(v)
			b = b[n:]
			continue
		case num == 2 && typ == protowire.BytesType:
			r.statuses++
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("rawCodec: bad response field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}
