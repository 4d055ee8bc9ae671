package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestStandInKeySpace: a key-space scenario warms up with one lap of its values (loadgen -warmup-lap), and its
// run has the server's RSS samples, without Redis (the stand-in serves it).
func TestStandInKeySpace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the harness's binaries")
	}
	out := t.TempDir()
	err := run(t.Context(), []string{"-stand-in", "-scenarios", "million", "-million-keys", "500", "-runs", "1",
		"-duration", "2500ms", "-warmup", "0s", "-c", "4", "-redis-server", "/nonexistent/redis-server", "-out", out},
		io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var rep report
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if r.Error != "" || r.Load == nil || r.Load.Calls == 0 || r.Load.Keys != 500 {
		t.Fatalf("run: error %q, load %+v", r.Error, r.Load)
	}
	ks := r.KeySpace
	if ks == nil || ks.Values != 500 || ks.RSSSamples == 0 || ks.RSSMax == 0 || ks.RSSStart > ks.RSSMax {
		t.Errorf("key space %+v, want 500 values and RSS samples in the measured interval", ks)
	}
	if s := rep.Summary[0].KeySpace; s == nil || s.RSSMaxMiB == nil {
		t.Errorf("summary key space %+v, want the RSS figures", s)
	}
}
