package pngfile

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	if err := Write(path, vgimg.New(vg.Points(40), vg.Points(30))); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil || cfg.Width == 0 || cfg.Height == 0 {
		t.Errorf("DecodeConfig = %+v, %v, want a PNG with a size", cfg, err)
	}
	if err := Write(filepath.Join(t.TempDir(), "missing", "c.png"), vgimg.New(1, 1)); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}
