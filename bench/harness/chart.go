package main

import (
	"fmt"
	"math"
	"strconv"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/pngfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chartNames are the x-axis names: the table's labels are too long to sit under a bar.
var chartNames = map[string]string{
	"noop": "noop", "a": "a allowed", "b": "b hot", "c": "c 3 desc", "d": "d distinct", "e": "e memory",
	"f": "f one over", "fn": "fn no cache", "h": "h hot keys", "s": "s sliding", "cl": "cl cluster",
	"ref": "ref envoyproxy", "target": "target",
	"a-sw": "a sliding", "a-tb": "a bucket", "a-sl": "a log",
	"million": "1M keys", "million-sliding": "1M sliding", "rlqs": "rlqs reports",
}

// chart draws two panels into one PNG: decisions/s per scenario with one bar per run (so the spread shows),
// and the median p50, p99 and p99.9 per scenario.
func (r *report) chart(path string) error {
	names := make([]string, len(r.Summary))
	for i, s := range r.Summary {
		names[i] = chartNames[s.Name]
	}
	zeroNaN := func(x float64) float64 {
		if math.IsNaN(x) {
			return 0
		}
		return x
	}

	runs := 0
	for _, s := range r.Summary {
		runs = max(runs, s.Runs)
	}
	tp := plot.New()
	tp.Title.Text = "Throughput (higher is better)"
	tp.Y.Label.Text = "decisions/s"
	tp.Y.Min = 0
	w := vg.Points(min(40/float64(max(runs, 1)), 14))
	for run := 1; run <= runs; run++ {
		vals := make(plotter.Values, len(r.Summary))
		for i, s := range r.Summary {
			vals[i] = math.NaN()
			for _, rr := range r.Runs {
				if rr.Scenario == s.Name && rr.Run == run && rr.Load != nil && rr.Error == "" {
					vals[i] = rr.Load.DecisionsPerS
				}
			}
			vals[i] = zeroNaN(vals[i])
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(run - 1)
		bars.Offset = vg.Length(float64(run-1)-float64(runs-1)/2) * w
		tp.Add(bars)
		tp.Legend.Add(fmt.Sprintf("run %d", run), bars)
	}
	tp.Legend.Top = true
	tp.NominalX(names...)
	tp.Y.Max *= 1.2 // room for the legend above the tallest bar
	tp.Y.Tick.Marker = wholeTicks{}

	lp := plot.New()
	lp.Title.Text = "Latency, median of runs (lower is better)"
	lp.Y.Label.Text = "µs"
	lp.Y.Min = 0
	lw := vg.Points(12)
	for i, q := range []struct {
		name string
		get  func(scenarioResult) *float64
	}{
		{"p50", func(s scenarioResult) *float64 { return s.P50Us }},
		{"p99", func(s scenarioResult) *float64 { return s.P99Us }},
		{"p99.9", func(s scenarioResult) *float64 { return s.P999Us }},
	} {
		vals := make(plotter.Values, len(r.Summary))
		for j, s := range r.Summary {
			vals[j] = zeroNaN(val(q.get(s)))
		}
		bars, err := plotter.NewBarChart(vals, lw)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i + 3)
		bars.Offset = vg.Length(i-1) * lw
		lp.Add(bars)
		lp.Legend.Add(q.name, bars)
	}
	lp.Legend.Top = true
	lp.Legend.Left = true
	lp.NominalX(names...)
	lp.Y.Max *= 1.25
	lp.Y.Tick.Marker = wholeTicks{}

	img := vgimg.New(vg.Points(1100), vg.Points(420))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(24), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	plots := [][]*plot.Plot{{tp, lp}}
	canvases := plot.Align(plots, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[0][1])

	return pngfile.Write(path, img)
}

// wholeTicks label the axis at up to six round values (1, 2 or 5 times a power of ten apart, at least 1)
// as whole numbers: for some ranges plot.DefaultTicks labels only two ticks, with decimals ("25000.00"). gonum
// hands Ticks a range with max > min.
type wholeTicks struct{}

func (wholeTicks) Ticks(min, max float64) []plot.Tick {
	base, step := math.Pow(10, math.Floor(math.Log10((max-min)/5))), 0.0
	for _, m := range []float64{1, 2, 5, 10} {
		if step = math.Max(base*m, 1); (max-min)/step <= 5 {
			break
		}
	}
	var ticks []plot.Tick
	for k := math.Ceil(min / step); k*step <= max; k++ {
		v := k * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
	}
	return ticks
}
