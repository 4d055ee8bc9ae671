package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: one\n")
	write("b.yml", "domain: two\n")
	write("notes.txt", "not rules")
	write(".hidden.yaml", "domain: [broken")
	r, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := strings.Join(r.Domains(), ","); got != "one,two" {
		t.Errorf("Domains = %q, want one,two", got)
	}
	write("c.yaml", "\n\ndomain: one\n")
	write("d.yaml", "domain: d\nbogus: 1\n")
	_, err = Load(dir)
	if err == nil {
		t.Fatal("Load with a duplicate domain succeeded")
	}
	for _, w := range []string{"c.yaml:3: domain: domain \"one\" is already defined in " + filepath.Join(dir, "a.yaml") + ":1", "d.yaml:2: bogus: unknown field"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Load(missing) = %v, want an error naming the path", err)
	}
}
