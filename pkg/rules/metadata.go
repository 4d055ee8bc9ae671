package rules

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// Bounds on one descriptor's metadata. Aliases can make a small file
// describe a huge (or, through a cycle, endless) value, so decoding stops
// at these.
const (
	maxMetadataValues = 10000
	maxMetadataDepth  = 32
)

// metadata decodes a descriptor's metadata: a mapping whose values may be
// of any YAML kind. Null is no metadata. A problem leaves it nil.
func (d *decoder) metadata(n *yaml.Node, where string) map[string]any {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, where, "want a mapping, got %s", kindName(n))
		return nil
	}
	m := &metaDecoder{d: d, budget: maxMetadataValues}
	v, ok := m.value(n, where, 0)
	if !ok {
		return nil
	}
	return v.(map[string]any)
}

// metaDecoder turns YAML nodes into the plain values structpb takes,
// reporting the first problem only: the rest of a broken value says
// little.
type metaDecoder struct {
	d      *decoder
	budget int // values left to decode
}

func (m *metaDecoder) fail(n *yaml.Node, where, format string, args ...any) (any, bool) {
	m.d.fail(n, where, format, args...)
	return nil, false
}

func (m *metaDecoder) value(n *yaml.Node, where string, depth int) (any, bool) {
	n = deref(n)
	if m.budget--; m.budget < 0 {
		return m.fail(n, where, "metadata has more than %d values", maxMetadataValues)
	}
	if depth > maxMetadataDepth {
		return m.fail(n, where, "metadata is nested more than %d deep", maxMetadataDepth)
	}
	switch n.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := deref(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return m.fail(k, where, "metadata keys must be strings, got %s", kindName(k))
			}
			at := join(where, k.Value)
			if _, dup := out[k.Value]; dup {
				return m.fail(k, at, "field given twice")
			}
			v, ok := m.value(n.Content[i+1], at, depth+1)
			if !ok {
				return nil, false
			}
			out[k.Value] = v
		}
		return out, true
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, ok := m.value(item, fmt.Sprintf("%s[%d]", where, i), depth+1)
			if !ok {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	case yaml.ScalarNode:
		return m.scalar(n, where)
	}
	return m.fail(n, where, "want a metadata value, got %s", kindName(n))
}

// scalar decodes a scalar as its tag says: numbers become float64, the
// only number of dynamic metadata, and must be finite and, for whole
// numbers, exact; anything that is not null, bool or a number (timestamps
// included) stays the text written.
func (m *metaDecoder) scalar(n *yaml.Node, where string) (any, bool) {
	switch n.Tag {
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return m.fail(n, where, "want true or false, got %q", n.Value)
		}
		return b, true
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil || i > 1<<53 || i < -(1<<53) {
			return m.fail(n, where, "whole number %s does not fit a metadata number (a double) exactly", n.Value)
		}
		return float64(i), true
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return m.fail(n, where, "want a finite number, got %q", n.Value)
		}
		return f, true
	}
	return n.Value, true
}

// metadata builds a descriptor's metadata once, for every response
// that carries it; nil when there is none.
func (c *compiler) metadata(d *Descriptor) *structpb.Struct {
	if len(d.Metadata) == 0 {
		return nil
	}
	s, err := structpb.NewStruct(d.Metadata)
	if err != nil {
		c.fail(d.at("metadata"), d.field("metadata"), "%s", err)
		return nil
	}
	return s
}
