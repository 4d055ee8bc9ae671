package faults

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/pngfile"
)

// Result is one fault's figures for one server.
type Result struct {
	Fault        string  `json:"fault"`
	Server       string  `json:"server"`
	Rate         float64 `json:"rate"`
	Before       Phase   `json:"before"`
	During       Phase   `json:"during"`
	After        Phase   `json:"after"`
	BackToNormal float64 `json:"back_to_normal_s"` // -1: not within the run
	OverAdmitted int     `json:"over_admitted"`
	// RedisCPUus is the Redis server's CPU per call decided during the
	// fault, in µs: the commands of every call, and of none answered
	// without Redis.
	RedisCPUus float64 `json:"redis_cpu_us_per_decision"`
	// BreakerOpened is how many times the sidecar's circuit breaker opened
	// during the run (from its log).
	BreakerOpened int `json:"breaker_opened"`
	// A sidecar's process: before the fault, the most during it and
	// after it, and at the end.
	UsageBefore Usage `json:"usage_before"`
	UsagePeak   Usage `json:"usage_peak"`
	UsageEnd    Usage `json:"usage_end"`
	Timeline    []Bin `json:"timeline"`
}

// SoakSample is one interval of the soak for one replica.
type SoakSample struct {
	Replica string  `json:"replica"`
	At      float64 `json:"at_min"`
	Usage   Usage   `json:"usage"`
	P99ms   float64 `json:"p99_ms"`
	Calls   int     `json:"calls"`
	Decided int     `json:"decided"`
}

// group returns the faults in order of first appearance, and for each the
// servers in order, each with its results over every run.
func group(results []Result) (faults []string, servers map[string][]string, by map[[2]string][]Result) {
	servers, by = map[string][]string{}, map[[2]string][]Result{}
	for _, r := range results {
		k := [2]string{r.Fault, r.Server}
		if _, ok := servers[r.Fault]; !ok {
			faults = append(faults, r.Fault)
		}
		if _, ok := by[k]; !ok {
			servers[r.Fault] = append(servers[r.Fault], r.Server)
		}
		by[k] = append(by[k], r)
	}
	return faults, servers, by
}

// med is the median of f over rs (the lower middle of an even count).
func med(rs []Result, f func(Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// Tables renders one markdown table per fault, a column per server, each
// cell the median over the runs.
func Tables(results []Result) string {
	var b strings.Builder
	faults, servers, by := group(results)
	for _, f := range faults {
		names := servers[f]
		runs := len(by[[2]string{f, names[0]}])
		fmt.Fprintf(&b, "#### %s\n\n| median of %d run(s) |", f, runs)
		for _, s := range names {
			fmt.Fprintf(&b, " %s |", s)
		}
		b.WriteString("\n| --- |")
		for range names {
			b.WriteString(" --: |")
		}
		b.WriteString("\n")
		row := func(name string, cell func(rs []Result) string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, s := range names {
				fmt.Fprintf(&b, " %s |", cell(by[[2]string{f, s}]))
			}
			b.WriteString("\n")
		}
		m := func(f func(Result) float64) func(rs []Result) float64 {
			return func(rs []Result) float64 { return med(rs, f) }
		}
		row("decided within 20 ms, during", func(rs []Result) string { return pct(m(func(r Result) float64 { return r.During.Within20ms })(rs)) })
		row("decided within the deadline, during", func(rs []Result) string {
			return pct(m(func(r Result) float64 { return r.During.WithinDeadline })(rs))
		})
		pp := func(p func(Result) Phase) func(rs []Result) string {
			return func(rs []Result) string {
				return fmt.Sprintf("%.1f / %.1f", med(rs, func(r Result) float64 { return p(r).P50ms }), med(rs, func(r Result) float64 { return p(r).P99ms }))
			}
		}
		row("p50 / p99 before (ms)", pp(func(r Result) Phase { return r.Before }))
		row("p50 / p99 during (ms)", pp(func(r Result) Phase { return r.During }))
		row("p50 / p99 after (ms)", pp(func(r Result) Phase { return r.After }))
		row("answers during: OK / OVER_LIMIT / Unavailable / deadline / other", func(rs []Result) string {
			parts := make([]string, 0, kinds)
			for k := range kinds {
				parts = append(parts, fmt.Sprint(med(rs, func(r Result) float64 { return float64(r.During.Kinds[Kind(k).String()]) })))
			}
			return strings.Join(parts, " / ")
		})
		row("Redis CPU per decision during (µs)", func(rs []Result) string {
			// Not measured on Sentinel or Cluster, nor while Redis is down.
			if v := med(rs, func(r Result) float64 { return r.RedisCPUus }); v > 0 {
				return fmt.Sprintf("%.1f", v)
			}
			return "–"
		})
		row("times the sidecar's circuit breaker opened", func(rs []Result) string {
			if rs[0].UsageBefore.Goroutines == 0 {
				return "–"
			}
			return fmt.Sprint(med(rs, func(r Result) float64 { return float64(r.BreakerOpened) }))
		})
		row("over-admitted on a key over its limit", func(rs []Result) string {
			return fmt.Sprint(med(rs, func(r Result) float64 { return float64(r.OverAdmitted) }))
		})
		row("back to normal after the fault", func(rs []Result) string {
			back := med(rs, func(r Result) float64 {
				if r.BackToNormal < 0 {
					return math.Inf(1)
				}
				return r.BackToNormal
			})
			if math.IsInf(back, 1) {
				return "not within the run"
			}
			return fmt.Sprintf("%.1f s", back)
		})
		usage := func(f func(Usage) float64, format string) func(rs []Result) string {
			return func(rs []Result) string {
				if rs[0].UsageBefore.Goroutines == 0 {
					return "–"
				}
				return fmt.Sprintf(format, med(rs, func(r Result) float64 { return f(r.UsageBefore) }),
					med(rs, func(r Result) float64 { return f(r.UsagePeak) }), med(rs, func(r Result) float64 { return f(r.UsageEnd) }))
			}
		}
		row("RSS MB before / peak / end", usage(func(u Usage) float64 { return u.RSSMB }, "%.0f / %.0f / %.0f"))
		row("goroutines before / peak / end", usage(func(u Usage) float64 { return float64(u.Goroutines) }, "%.0f / %.0f / %.0f"))
		conns := usage(func(u Usage) float64 { return float64(u.RedisConns) }, "%.0f / %.0f / %.0f")
		row("Redis connections before / peak / end", func(rs []Result) string {
			if rs[0].UsageBefore.RedisConns == 0 { // counted by the fault proxy, which Sentinel and Cluster runs lack
				return "–"
			}
			return conns(rs)
		})
		b.WriteString("\n")
	}
	return b.String()
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// Chart draws, for one fault's first run, a panel per server: p99 (log
// scale) and the calls decided and not decided per bin, over time, with
// the fault's start and end marked.
func Chart(path string, results []Result, fault string, start, end float64) error {
	var rs []Result
	for _, r := range results {
		if r.Fault == fault && !slices.ContainsFunc(rs, func(x Result) bool { return x.Server == r.Server }) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("no results for %q", fault)
	}
	const w, h = 8 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(w, h*vg.Length(len(rs)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rs), Cols: 1, PadX: vg.Millimeter, PadY: vg.Millimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter}
	for i, r := range rs {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: %s", fault, r.Server)
		p.X.Label.Text = fmt.Sprintf("seconds; the fault from %.0f s to %.0f s", start, end)
		p.Y.Label.Text = "calls per bin / p99 ms"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		var p99, decided, failed plotter.XYs
		for _, bin := range r.Timeline {
			d := bin.Kinds[OK] + bin.Kinds[OverLimit]
			f := bin.Kinds[Unavailable] + bin.Kinds[Deadline] + bin.Kinds[OtherError]
			// A log axis has no 0: an empty count sits at 0.5, below 1.
			p99 = append(p99, plotter.XY{X: bin.At, Y: math.Max(bin.P99ms, 0.05)})
			decided = append(decided, plotter.XY{X: bin.At, Y: math.Max(float64(d), 0.5)})
			failed = append(failed, plotter.XY{X: bin.At, Y: math.Max(float64(f), 0.5)})
		}
		if err := plotutil.AddLines(p, "p99 (ms)", p99, "decided", decided, "not decided (Unavailable, deadline, error)", failed); err != nil {
			return err
		}
		p.Legend.Top = true
		p.Add(vline(start), vline(end))
		p.Draw(draw.Crop(tiles.At(dc, 0, i), 0, 0, 0, 0))
	}
	return pngfile.Write(path, img)
}

func vline(x float64) *plotter.Line {
	l, _ := plotter.NewLine(plotter.XYs{{X: x, Y: 0.5}, {X: x, Y: 5000}})
	l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	return l
}

// SoakChart draws the soak's curves, a panel each: RSS and heap (MB),
// goroutines, and p99 (ms), per replica over the minutes.
func SoakChart(path string, samples []SoakSample) error {
	panels := []struct {
		title string
		f     func(SoakSample) float64
	}{
		{"RSS (MB)", func(s SoakSample) float64 { return s.Usage.RSSMB }},
		{"Go heap in use (MB)", func(s SoakSample) float64 { return s.Usage.HeapMB }},
		{"goroutines", func(s SoakSample) float64 { return float64(s.Usage.Goroutines) }},
		{"open file descriptors", func(s SoakSample) float64 { return float64(s.Usage.FDs) }},
		{"p99 (ms)", func(s SoakSample) float64 { return s.P99ms }},
	}
	const w, h = 8 * vg.Inch, 2.2 * vg.Inch
	img := vgimg.New(w, h*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: vg.Millimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter}
	var replicas []string
	for _, s := range samples {
		if !slices.Contains(replicas, s.Replica) {
			replicas = append(replicas, s.Replica)
		}
	}
	for i, panel := range panels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "minutes"
		p.Y.Min = 0
		var lines []any
		for _, r := range replicas {
			var xy plotter.XYs
			for _, s := range samples {
				if s.Replica == r {
					xy = append(xy, plotter.XY{X: s.At, Y: panel.f(s)})
				}
			}
			lines = append(lines, "replica "+r, xy)
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return err
		}
		p.Legend.Top = true
		p.Draw(draw.Crop(tiles.At(dc, 0, i), 0, 0, 0, 0))
	}
	return pngfile.Write(path, img)
}
