package xds

import (
	"reflect"
	"testing"
)

func TestParseNodeMetadata(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    map[string]any
		ignored []string
		bad     bool
	}{
		{in: "", want: nil},
		{in: "a=1,b=x=y", want: map[string]any{"a": "1", "b": "x=y"}},
		{in: "key1:val1,key2=val2", want: map[string]any{"key2": "val2"}, ignored: []string{"key1:val1"}},
		{in: `{"cluster": "eg", "n": 2}`, want: map[string]any{"cluster": "eg", "n": 2.0}},
		{in: `{"cluster"`, bad: true},
	}
	for _, tt := range tests {
		md, ignored, err := ParseNodeMetadata(tt.in)
		if (err != nil) != tt.bad {
			t.Errorf("ParseNodeMetadata(%q) error = %v, want error %v", tt.in, err, tt.bad)
			continue
		}
		var got map[string]any
		if md != nil {
			got = md.AsMap()
		}
		if !tt.bad && (!reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(ignored, tt.ignored)) {
			t.Errorf("ParseNodeMetadata(%q) = %v, ignored %q, want %v, %q", tt.in, got, ignored, tt.want, tt.ignored)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want map[string]string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "a:1,b:x:y", want: map[string]string{"a": "1", "b": "x:y"}},
		{in: "a=1", bad: true},
		{in: ":1", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseHeaders(tt.in)
		if (err != nil) != tt.bad || !tt.bad && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHeaders(%q) = %v, %v, want %v (error %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}
