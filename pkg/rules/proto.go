package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// ProtoTypeURL is the type URL of envoyproxy/ratelimit's RateLimitConfig,
// the resource an xDS server sends it rules as.
const ProtoTypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// FromProto returns the File of an xDS RateLimitConfig, named name (a
// Problem's File, and the source GET /rules shows): one domain, its
// descriptors with each field the proto carries. Positions hold the path
// of each value and no line, so a field counts as given when its value is
// not zero. The project's own fields, which the proto lacks (failure_mode,
// algorithm, unit_multiplier), are left unset for the caller to fill.
//
// A rate limit whose unit is UNKNOWN has no unit (a problem, unless it is
// unlimited); an unlimited one has no requests_per_unit, which it ignores.
// A unit number the proto does not name compiles as an unknown unit.
func FromProto(name string, c *rlsconfv3.RateLimitConfig) *File {
	f := &File{Name: name, Domain: c.GetDomain()}
	f.Descriptors = protoDescriptors(c.GetDescriptors(), "descriptors")
	return f
}

func protoDescriptors(in []*rlsconfv3.RateLimitDescriptor, where string) []Descriptor {
	if len(in) == 0 {
		return nil
	}
	out := make([]Descriptor, len(in))
	for i, d := range in {
		path := fmt.Sprintf("%s[%d]", where, i)
		out[i] = Descriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
			Descriptors:    protoDescriptors(d.GetDescriptors(), path+".descriptors"),
			Pos:            Pos{Path: path},
		}
		if m := d.GetMetadata(); len(m.GetFields()) > 0 {
			out[i].Metadata = m.AsMap()
		}
		if p := d.GetRateLimit(); p != nil {
			out[i].RateLimit = protoRateLimit(p, path+".rate_limit")
		}
	}
	return out
}

func protoRateLimit(p *rlsconfv3.RateLimitPolicy, path string) *RateLimit {
	r := &RateLimit{Name: p.GetName(), Unlimited: p.GetUnlimited(), Pos: Pos{Path: path}}
	if u := p.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
		r.Unit = strings.ToLower(u.String())
	}
	if !r.Unlimited {
		n := p.GetRequestsPerUnit()
		r.RequestsPerUnit = &n
	}
	for i, rp := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, Replace{Name: rp.GetName(), Pos: Pos{Path: fmt.Sprintf("%s.replaces[%d]", path, i)}})
	}
	return r
}

// DecodeProto decodes a RateLimitConfig written as JSON or YAML (its
// protojson form: field names in snake_case or lowerCamelCase, units by
// name such as "MINUTE"), strictly: an unknown field is a problem. A
// leading "@type" of ProtoTypeURL, as an xDS dump shows the resource, is
// allowed. The File is FromProto's, or nil with the problem.
func DecodeProto(name string, data []byte) (*File, []Problem) {
	js := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		var err error
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return nil, []Problem{{File: name, Msg: "not valid YAML: " + err.Error()}}
		}
	}
	js, err := stripTypeURL(js)
	if err != nil {
		return nil, []Problem{{File: name, Msg: err.Error()}}
	}
	var c rlsconfv3.RateLimitConfig
	if err := protojson.Unmarshal(js, &c); err != nil {
		return nil, []Problem{{File: name, Msg: "not a RateLimitConfig: " + err.Error()}}
	}
	return FromProto(name, &c), nil
}

// stripTypeURL removes a top-level "@type" naming a RateLimitConfig.
func stripTypeURL(js []byte) ([]byte, error) {
	if !bytes.Contains(js, []byte(`"@type"`)) {
		return js, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("not a RateLimitConfig: %w", err)
	}
	raw, ok := m["@type"]
	if !ok {
		return js, nil
	}
	var t string
	if json.Unmarshal(raw, &t) != nil || t != ProtoTypeURL {
		return nil, fmt.Errorf("@type %s: want %q", raw, ProtoTypeURL)
	}
	delete(m, "@type")
	return json.Marshal(m)
}
