package accuracy_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/pngfile"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

var writeDocs = flag.Bool("write-docs", false, "TestAccuracy writes its table into docs/algorithms.md and its chart to docs/algorithms.png")

// t0 is the simulation's clock origin, a window boundary for every size used.
var t0 = time.UnixMilli(1_763_800_020_000)

// The simulated limit: 100 requests per 60 s window.
const (
	simLimit = 100
	simSize  = 60_000 // ms
)

// simStart is a window boundary; every pattern starts there.
var simStart = t0.UnixMilli()

// pattern is a traffic pattern: request arrival times in ms after simStart,
// ascending.
type pattern struct {
	name    string // short, for the chart
	desc    string // for the table
	arrival []int64
}

// burst returns n arrivals spread evenly over [from, from+span).
func burst(from, span int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + span*int64(i)/int64(n)
	}
	return out
}

func patterns() []pattern {
	// steady: 1.5 x the limit, evenly spaced, for 10 windows.
	steady := burst(0, 10*simSize, 10*simLimit*3/2)

	// boundary: an empty window, then the limit in the last 1% of window 1
	// and the limit again in the first 1% of window 2.
	boundary := append(burst(2*simSize-simSize/100, simSize/100, simLimit), burst(2*simSize, simSize/100, simLimit)...)

	// on-off: the limit in 1% of a window, every 0.7 windows, 15 times.
	var onOff []int64
	for i := range 15 {
		onOff = append(onOff, burst(int64(i)*simSize*7/10, simSize/100, simLimit)...)
	}

	// poisson: 1.2 x the limit with exponential gaps, 50 windows, fixed seed.
	rng := rand.New(rand.NewPCG(1, 2))
	var poisson []int64
	meanGap := float64(simSize) / (1.2 * simLimit)
	for t := rng.ExpFloat64() * meanGap; t < 50*simSize; t += rng.ExpFloat64() * meanGap {
		poisson = append(poisson, int64(t))
	}

	// late burst: the limit in the last 1% of window 1, then 1.5 x the
	// limit evenly through windows 2 and 3: the sliding counter's worst case.
	lateBurst := append(burst(2*simSize-simSize/100, simSize/100, simLimit), burst(2*simSize, 2*simSize, 2*simLimit*3/2)...)

	return []pattern{
		{"steady 1.5x", "steady: 1.5 x the limit, evenly spaced, 10 windows", steady},
		{"boundary burst", "boundary burst: the limit in the last 1% of a window and again in the first 1% of the next", boundary},
		{"on-off", "on-off: the limit within 1% of a window, every 0.7 windows, 15 bursts", onOff},
		{"poisson 1.2x", "Poisson: 1.2 x the limit, exponential gaps, 50 windows, seeded", poisson},
		{"late burst + steady", "late burst: the limit in the last 1% of a window, then 1.5 x the limit evenly for two windows", lateBurst},
	}
}

// algorithm decides one request at a time; allow counts it when it admits.
type algorithm struct {
	name  string
	allow func() func(ms int64) bool // a fresh limiter per pattern
}

func algorithms(t *testing.T) []algorithm {
	store := func(a window.Algorithm) func() func(int64) bool {
		return func() func(int64) bool {
			m := window.NewMemory()
			reqs := []window.Request{{Key: "sim:{k}", Limit: simLimit, Size: simSize * time.Millisecond, Hits: 1, Algorithm: a}}
			res := make([]window.Result, 1)
			return func(ms int64) bool {
				ok, err := m.Take(context.Background(), time.UnixMilli(simStart+ms), reqs, res)
				if err != nil {
					t.Fatalf("Take: %v", err)
				}
				return ok
			}
		}
	}
	return []algorithm{
		{"fixed window", store(window.FixedWindow)},
		{"sliding window", store(window.SlidingWindow)},
		{"exact sliding log", exactLog},
	}
}

// exactLog is the reference: a log of admitted times that admits a request
// at now if fewer than the limit were admitted in (now-size, now].
func exactLog() func(ms int64) bool {
	var log []int64
	return func(ms int64) bool {
		for len(log) > 0 && log[0] <= ms-simSize {
			log = log[1:]
		}
		if len(log)+1 > simLimit {
			return false
		}
		log = append(log, ms)
		return true
	}
}

// measure returns the largest number of admitted requests in any
// (t-size, t], over the limit, and how many admissions left more than the
// limit in the rolling window that ends at them. The maximum is reached at
// some admitted instant t, so it suffices to look there.
func measure(admitted []int64) (worst float64, over int) {
	most, lo := 0, 0
	for hi, t := range admitted {
		for admitted[lo] <= t-simSize {
			lo++
		}
		if hi-lo+1 > simLimit {
			over++
		}
		// Requests admitted at the same instant as t all count.
		n := hi - lo + 1
		for j := hi + 1; j < len(admitted) && admitted[j] == t; j++ {
			n++
		}
		most = max(most, n)
	}
	return float64(most) / simLimit, over
}

type outcome struct {
	worst    float64 // worst over-admission, a multiple of the limit
	admitted int
	over     int // admissions beyond the limit of their rolling window
}

func simulate(allow func(int64) bool, arrival []int64) outcome {
	var admitted []int64
	for _, ms := range arrival {
		if allow(ms) {
			admitted = append(admitted, ms)
		}
	}
	worst, over := measure(admitted)
	return outcome{worst, len(admitted), over}
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		admitted []int64
		worst    float64
		over     int
	}{
		{nil, 0, 0},
		{burst(0, 1000, 100), 1, 0},
		{burst(0, 120_000, 200), 1, 0}, // 100 per window, evenly
		{append(burst(59_000, 1000, 100), burst(60_000, 1000, 100)...), 2, 100},
		{[]int64{0, simSize}, 0.01, 0}, // (t-size, t] excludes t-size
		{[]int64{5, 5, 5}, 0.03, 0},
	} {
		worst, over := measure(tt.admitted)
		if math.Abs(worst-tt.worst) > 1e-9 || over != tt.over {
			t.Errorf("measure(%d admitted) = %v, %d, want %v, %d", len(tt.admitted), worst, over, tt.worst, tt.over)
		}
	}
}

// TestAccuracy replays each traffic pattern through each algorithm and
// measures the worst over-admission. With -write-docs it also writes the
// table into docs/algorithms.md and the chart to docs/algorithms.png.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	pats, algs := patterns(), algorithms(t)
	got := make([][]outcome, len(pats)) // [pattern][algorithm]
	for i, p := range pats {
		got[i] = make([]outcome, len(algs))
		for j, a := range algs {
			got[i][j] = simulate(a.allow(), p.arrival)
		}
	}
	table := accuracyTable(pats, algs, got)
	t.Log("\n" + table)

	const exact = 2
	for i, p := range pats {
		// The reference can never exceed the limit, or the measure is wrong.
		if w := got[i][exact].worst; w > 1 {
			t.Errorf("%s: exact log worst = %.2f, want <= 1", p.name, w)
		}
		// Every algorithm admits at least what the exact log admits at its
		// worst moment: none is so strict that it wastes a whole window.
		for j, a := range algs {
			if got[i][j].worst < 0.99 {
				t.Errorf("%s, %s: worst = %.2f, want >= 0.99 (the pattern asks for more than the limit)", p.name, a.name, got[i][j].worst)
			}
		}
	}
	// The bounds are what the patterns really give, with a little margin;
	// docs/algorithms.md explains each. min <= worst <= max.
	type bound struct{ min, max float64 }
	bounds := map[string][2]bound{ // fixed, sliding
		// A steady stream fills a fixed window in its first 2/3 and is then
		// denied until the boundary, so no rolling window sees more than
		// one window's admissions. The sliding estimate is exact for an
		// even spread.
		"steady 1.5x": {{0.99, 1.01}, {0.99, 1.02}},
		// The fixed window's textbook failure. The sliding counter still
		// weighs the previous window at 99-100% during the second burst.
		"boundary burst": {{1.9, 2}, {0.99, 1.02}},
		// Bursts at changing phases. A burst late in one window is
		// underweighted by the next window's estimate once the rolling
		// window has passed the phase at which it came: measured 1.19.
		"on-off": {{1.9, 2}, {0.99, 1.25}},
		// Random gaps spread no window evenly; the estimate is off by the
		// unevenness of the previous window, about its sqrt(n): measured
		// 1.10 for this seed, 1.07-1.12 over seeds 1-20.
		"poisson 1.2x": {{1, 1.5}, {0.99, 1.15}},
		// The sliding counter's worst case: every hit of the previous
		// window at its end, so the estimate lets them fade while they all
		// still count. Both algorithms approach twice the limit.
		"late burst + steady": {{1.9, 2}, {1.9, 2}},
	}
	for i, p := range pats {
		b, ok := bounds[p.name]
		if !ok {
			t.Fatalf("no bounds for pattern %q", p.name)
		}
		for j, name := range []string{"fixed", "sliding"} {
			if w := got[i][j].worst; w < b[j].min || w > b[j].max {
				t.Errorf("%s: %s window worst = %.2f, want in [%.2f, %.2f]", p.name, name, w, b[j].min, b[j].max)
			}
		}
	}

	if !*writeDocs {
		return
	}
	docs := filepath.Join("..", "..", "docs")
	if err := writeTable(filepath.Join(docs, "algorithms.md"), table); err != nil {
		t.Fatal(err)
	}
	if err := writeChart(filepath.Join(docs, "algorithms.png"), pats, algs, got); err != nil {
		t.Fatal(err)
	}
}

// accuracyTable returns two Markdown tables: the worst over-admission, and
// how many requests each algorithm admitted and how many of those went over
// the limit of their rolling window.
func accuracyTable(pats []pattern, algs []algorithm, got [][]outcome) string {
	var b strings.Builder
	row := func(first string, cells func(j int) string) {
		b.WriteString("| " + first + " |")
		for j := range algs {
			b.WriteString(" " + cells(j) + " |")
		}
		b.WriteString("\n")
	}
	head := func(first string) {
		row(first, func(j int) string { return algs[j].name })
		row("---", func(int) string { return "---:" })
	}
	fmt.Fprintf(&b, "Worst over-admission: the most requests admitted in any %d s, over the limit of %d.\n\n", simSize/1000, simLimit)
	head("pattern")
	for i, p := range pats {
		row(p.desc, func(j int) string { return fmt.Sprintf("%.2fx", got[i][j].worst) })
	}
	b.WriteString("\nAdmitted requests (of the offered), and how many of them left more than the limit in the rolling window that ends at them.\n\n")
	head("pattern (offered)")
	for i, p := range pats {
		row(fmt.Sprintf("%s (%d)", p.name, len(p.arrival)), func(j int) string {
			o := got[i][j]
			return fmt.Sprintf("%d, %d over (%.1f%%)", o.admitted, o.over, 100*float64(o.over)/float64(max(o.admitted, 1)))
		})
	}
	return b.String()
}

const (
	tableBegin = "<!-- accuracy table: generated by TestAccuracy -write-docs -->\n"
	tableEnd   = "<!-- end of accuracy table -->"
)

// writeTable replaces the generated table in the Markdown file at path.
func writeTable(path, table string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := bytes.Index(doc, []byte(tableBegin))
	j := bytes.Index(doc, []byte(tableEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q markers", path, strings.TrimSpace(tableBegin), tableEnd)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(tableBegin)])
	out.WriteString(table)
	out.Write(doc[j:])
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// writeChart draws grouped bars: the worst over-admission per pattern, one
// bar per algorithm, with the limit as a dashed line.
func writeChart(path string, pats []pattern, algs []algorithm, got [][]outcome) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Worst over-admission: most requests admitted in any %d s, over the limit (%d)", simSize/1000, simLimit)
	p.Y.Label.Text = "× limit"
	p.Y.Min, p.Y.Max = 0, 2.3
	grid := plotter.NewGrid() // first, so the bars cover it
	grid.Vertical.Width = 0
	p.Add(grid)
	w := vg.Points(40)
	for j, a := range algs {
		vals := make(plotter.Values, len(pats))
		labels := make([]string, len(pats))
		xys := make(plotter.XYs, len(pats))
		for i := range pats {
			vals[i] = got[i][j].worst
			labels[i] = fmt.Sprintf("%.2f", vals[i])
			xys[i] = plotter.XY{X: float64(i), Y: vals[i]}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(j)
		bars.Offset = vg.Length(j-1) * w
		p.Add(bars)
		p.Legend.Add(a.name, bars)
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.Offset = vg.Point{X: vg.Length(j-1)*w - vg.Points(11), Y: vg.Points(3)}
		p.Add(l)
	}
	limit := plotter.NewFunction(func(float64) float64 { return 1 })
	limit.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	limit.Color = plotutil.Color(6)
	p.Add(limit)
	p.Legend.Add("limit", limit)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	var ticks []plot.Tick
	for y := 0.0; y <= p.Y.Max; y += 0.25 {
		label := ""
		if math.Mod(y, 0.5) == 0 {
			label = fmt.Sprintf("%.1f", y)
		}
		ticks = append(ticks, plot.Tick{Value: y, Label: label})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.NominalX(func() []string {
		names := make([]string, len(pats))
		for i, pt := range pats {
			names[i] = pt.name
		}
		return names
	}()...)
	p.X.Min, p.X.Max = -0.6, float64(len(pats))-0.4

	img := vgimg.New(vg.Points(760), vg.Points(380))
	p.Draw(draw.New(img))
	return pngfile.Write(path, img)
}
