// Package pngfile writes gonum/plot canvases as PNG files, for the charts
// that the load harness and the accuracy simulation generate.
package pngfile

import (
	"fmt"
	"os"

	"gonum.org/v1/plot/vg/vgimg"
)

// Write encodes c as PNG into the file at path, replacing it. A failed
// write leaves a partial file and returns its error.
func Write(path string, c *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("pngfile: %s: %w", path, err)
	}
	return f.Close()
}
