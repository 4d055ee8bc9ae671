package xds

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// ParseNodeMetadata parses the node metadata as envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_NODE_METADATA: "key=value,key=value", each value a
// string. Entries without "=" are skipped, as the reference skips them,
// and returned in ignored so that they can be reported. A value starting
// with "{" is a JSON object instead, whose values may be of any JSON
// kind. "" is no metadata: nil.
func ParseNodeMetadata(s string) (md *structpb.Struct, ignored []string, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil, nil
	}
	if strings.HasPrefix(strings.TrimSpace(s), "{") {
		md = &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(s), md); err != nil {
			return nil, nil, fmt.Errorf("xds: node metadata: not a JSON object: %w", err)
		}
		return md, nil, nil
	}
	md = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for entry := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(entry, "=")
		if !ok {
			ignored = append(ignored, entry)
			continue
		}
		md.Fields[k] = structpb.NewStringValue(v)
	}
	return md, ignored, nil
}

// ParseHeaders parses the stream's extra headers as envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: "name:value,name:value". An
// entry without ":" is an error, as the reference refuses it at start.
// "" is none.
func ParseHeaders(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for entry := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(entry, ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("xds: header %q: want name:value", entry)
		}
		out[k] = v
	}
	return out, nil
}
