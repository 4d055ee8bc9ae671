package main

import (
	"io"
	"strings"
	"testing"
)

// TestEngineFlags: -engine picks who sends the calls, where the results go
// unless -out says, and where -publish writes; -ghz goes with -engine ghz
// only.
func TestEngineFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    []string
		out     string
		doc     string
		wantErr string
	}{
		{nil, "bench/out", "benchmarks", ""},
		{[]string{"-engine", "ghz"}, "bench/out-ghz", "benchmarks-ghz", ""},
		{[]string{"-engine", "ghz", "-ghz", "/opt/ghz", "-out", "elsewhere"}, "elsewhere", "benchmarks-ghz", ""},
		{[]string{"-engine", "wrk"}, "", "", "-engine"},
		{[]string{"-ghz", "/opt/ghz"}, "", "", "-ghz is for -engine ghz"},
	} {
		o, err := parseFlags(tt.args, io.Discard)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseFlags(%q) = %v, want an error with %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || o.docName() != tt.doc || o.out != tt.out {
			t.Errorf("parseFlags(%q): %v, docName %q, out %q; want %q, %q", tt.args, err, o.docName(), o.out, tt.doc, tt.out)
		}
		if md := (&report{Options: optionsJSON(o)}).markdown(tt.doc + ".png"); !strings.Contains(md, "("+tt.doc+".png)") ||
			strings.Contains(md, "ghz "+ghzVersion) != (o.engine == "ghz") {
			t.Errorf("%q: the page does not name its own chart and engine", tt.args)
		}
	}
}
