package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The ConfigMaps that carry deploy/envoy.yaml and deploy/rules/edge.yaml, and their -update.

func checkConfigMaps(b *bundle) error {
	var errs []error
	for _, want := range []struct {
		cm, key, file string
		content       []byte
	}{
		{envoyConfigMap, "envoy.yaml", envoyFile, b.envoyRaw},
		{rulesConfigMap, filepath.Base(rulesFile), rulesFile, b.rulesRaw},
	} {
		cm, ok := b.configMaps[want.cm]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: no ConfigMap %s", k8sDir, want.cm))
			continue
		}
		if got, ok := cm.Data[want.key]; !ok || got != string(want.content) {
			errs = append(errs, fmt.Errorf("ConfigMap %s: data[%q] differs from %s (run go test ./test/deploy -update)", want.cm, want.key, want.file))
		}
		if len(cm.Data) != 1 || len(cm.BinaryData) != 0 {
			errs = append(errs, fmt.Errorf("ConfigMap %s: %d keys, want only %q", want.cm, len(cm.Data)+len(cm.BinaryData), want.key))
		}
	}
	return errors.Join(errs...)
}

// updateConfigMaps writes the ConfigMaps that carry deploy/envoy.yaml and deploy/rules/edge.yaml.
func updateConfigMaps(t *testing.T) {
	root := repoRoot(t)
	for _, cm := range []struct {
		name, key, src, dst string
	}{
		{envoyConfigMap, "envoy.yaml", envoyFile, "envoy-config.yaml"},
		{rulesConfigMap, filepath.Base(rulesFile), rulesFile, "ratelimit-rules.yaml"},
	} {
		content := readFile(t, root, cm.src)
		if !bytes.HasSuffix(content, []byte("\n")) || bytes.HasSuffix(content, []byte("\n\n")) || bytes.HasPrefix(content, []byte(" ")) {
			t.Fatalf("%s: must end in exactly one newline and not start with a space to fit a YAML block scalar", cm.src)
		}
		var out bytes.Buffer
		fmt.Fprintf(&out, "# %s as a ConfigMap, byte for byte. Do not edit: edit %s, then run\n", cm.src, cm.src)
		fmt.Fprintf(&out, "#   go test ./test/deploy -update\n# (test/deploy fails while the two differ).\n")
		fmt.Fprintf(&out, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: edge\ndata:\n  %s: |\n", cm.name, cm.key)
		for line := range strings.Lines(string(content)) {
			if strings.TrimSpace(line) == "" {
				out.WriteString("\n")
				continue
			}
			out.WriteString("    " + line)
		}
		if err := os.WriteFile(filepath.Join(root, k8sDir, cm.dst), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
