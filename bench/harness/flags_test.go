package main

import (
	"io"
	"strings"
	"testing"
)

// TestEngineFlags: -engine picks who sends the calls and where -publish
// writes; -ghz goes with -engine ghz only.
func TestEngineFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    []string
		doc     string
		wantErr string
	}{
		{nil, "benchmarks", ""},
		{[]string{"-engine", "ghz"}, "benchmarks-ghz", ""},
		{[]string{"-engine", "ghz", "-ghz", "/opt/ghz"}, "benchmarks-ghz", ""},
		{[]string{"-engine", "wrk"}, "", "-engine"},
		{[]string{"-ghz", "/opt/ghz"}, "", "-ghz is for -engine ghz"},
	} {
		o, err := parseFlags(tt.args, io.Discard)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseFlags(%q) = %v, want an error with %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || o.docName() != tt.doc {
			t.Errorf("parseFlags(%q): %v, docName %q; want %q", tt.args, err, o.docName(), tt.doc)
		}
		if md := (&report{Options: optionsJSON(o)}).markdown(tt.doc + ".png"); !strings.Contains(md, "("+tt.doc+".png)") ||
			strings.Contains(md, "ghz "+ghzVersion) != (o.engine == "ghz") {
			t.Errorf("%q: the page does not name its own chart and engine", tt.args)
		}
	}
}
