package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/pngfile"
)

// chartNames are the short names under the bars.
var chartNames = map[string]string{
	"a": "a batched", "a-load": "a, Redis at load", "s": "s sliding", "c": "c 3 desc", "h": "h hot keys", "cl-old": "cl unbatched", "cl": "cl Cluster", "ref": "ref envoyproxy",
}

// curves are the cost sets whose shards-against-rate curve the chart draws.
var curves = []string{"a", "cl-old", "cl", "ref"}

// chart draws two panels: sidecar cores and Redis shards at the workload's rate for each cost set, and the
// shards needed as the rate grows for a few of them, each curve ending where the hottest slot fills its core.
func chart(path string, cs []costs, w workload, kl keyLoad, o options) error {
	bp := plot.New()
	bp.Title.Text = fmt.Sprintf("At %.0fk decisions/s (cores at most %.0f%% busy)", w.rate/1e3, o.util*100)
	bp.Y.Label.Text = "count"
	bp.Y.Min = 0
	var names []string
	sidecar, shards := make(plotter.Values, len(cs)), make(plotter.Values, len(cs))
	for i, c := range cs {
		p := size(c, w.rate, kl, balanced, o.util, o.replicaCores, o.maxShards)
		name := chartName(c.name)
		sidecar[i] = p.sidecarCores
		if p.feasible {
			shards[i] = float64(p.shards)
		} else {
			name += "\n(no shard count:\nhot slot)"
		}
		names = append(names, name)
	}
	width := vg.Points(16)
	for i, s := range []struct {
		label string
		vals  plotter.Values
	}{{"sidecar cores", sidecar}, {"Redis shards (one core each)", shards}} {
		bars, err := plotter.NewBarChart(s.vals, width)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(float64(i)-0.5) * width
		bp.Add(bars)
		bp.Legend.Add(s.label, bars)
	}
	bp.Legend.Top = true
	bp.NominalX(names...)
	bp.Y.Max *= 1.2
	bp.Y.Tick.Marker = wholeTicks{}

	lp := plot.New()
	lp.Title.Text = "Redis shards needed as the rate grows (slots placed by load)"
	lp.X.Label.Text = "million decisions/s"
	lp.Y.Label.Text = "shards"
	lp.X.Min, lp.Y.Min = 0, 0
	for i, name := range curves {
		j := slices.IndexFunc(cs, func(c costs) bool { return c.name == name })
		if j < 0 {
			continue
		}
		var pts plotter.XYs
		for r := 0.1e6; r <= 2.5e6+1; r += 0.1e6 {
			p := size(cs[j], r, kl, balanced, o.util, o.replicaCores, o.maxShards)
			if !p.feasible {
				break
			}
			pts = append(pts, plotter.XY{X: r / 1e6, Y: float64(p.shards)})
		}
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		line.Color = plotutil.Color(i + 2)
		line.Width = vg.Points(2)
		lp.Add(line)
		lp.Legend.Add(chartName(name), line)
	}
	lp.Legend.Top = true
	lp.Legend.Left = true
	lp.X.Max = 2.5
	lp.Y.Tick.Marker = wholeTicks{}

	img := vgimg.New(vg.Points(1100), vg.Points(420))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(24), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{bp, lp}}, tiles, dc)
	bp.Draw(canvases[0][0])
	lp.Draw(canvases[0][1])
	return pngfile.Write(path, img)
}

func chartName(name string) string {
	if n := chartNames[name]; n != "" {
		return n
	}
	return name
}

// wholeTicks label an axis at about five whole numbers, 1, 2 or 5 times a power of ten apart.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	base := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	step := 1.0
	for _, m := range []float64{1, 2, 5, 10} {
		if step = math.Max(base*m, 1); (hi-lo)/step <= 5 {
			break
		}
	}
	var ticks []plot.Tick
	for k := math.Ceil(lo / step); k*step <= hi; k++ {
		ticks = append(ticks, plot.Tick{Value: k * step, Label: strconv.FormatFloat(k*step, 'f', 0, 64)})
	}
	return ticks
}
