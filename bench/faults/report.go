package faults

import (
	"fmt"
	"strings"
)

// Tables renders one markdown table per fault, a column per server.
func Tables(results []Result) string {
	var b strings.Builder
	var faults []string
	by := map[string][]Result{}
	for _, r := range results {
		if _, ok := by[r.Fault]; !ok {
			faults = append(faults, r.Fault)
		}
		by[r.Fault] = append(by[r.Fault], r)
	}
	for _, f := range faults {
		rs := by[f]
		fmt.Fprintf(&b, "#### %s\n\n| |", f)
		for _, r := range rs {
			fmt.Fprintf(&b, " %s |", r.Server)
		}
		b.WriteString("\n| --- |")
		for range rs {
			b.WriteString(" --: |")
		}
		b.WriteString("\n")
		row := func(name string, cell func(r Result) string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, r := range rs {
				fmt.Fprintf(&b, " %s |", cell(r))
			}
			b.WriteString("\n")
		}
		row("decided within 20 ms, during", func(r Result) string { return pct(r.During.Within20ms) })
		row("decided within the deadline, during", func(r Result) string { return pct(r.During.WithinDeadline) })
		row("p50 / p99 before (ms)", func(r Result) string { return fmt.Sprintf("%.1f / %.1f", r.Before.P50ms, r.Before.P99ms) })
		row("p50 / p99 during (ms)", func(r Result) string { return fmt.Sprintf("%.1f / %.1f", r.During.P50ms, r.During.P99ms) })
		row("p50 / p99 after (ms)", func(r Result) string { return fmt.Sprintf("%.1f / %.1f", r.After.P50ms, r.After.P99ms) })
		row("answers during: OK / OVER_LIMIT / Unavailable / deadline / other", func(r Result) string { return kindsCell(r.During) })
		row("Redis CPU per decision during (µs)", func(r Result) string { return fmt.Sprintf("%.1f", r.RedisCPUus) })
		row("over-admitted on a key over its limit", func(r Result) string { return fmt.Sprint(r.OverAdmitted) })
		row("back to normal after the fault", func(r Result) string {
			if r.BackToNormal < 0 {
				return "not within the run"
			}
			return fmt.Sprintf("%.1f s", r.BackToNormal)
		})
		row("RSS MB before / peak / end", func(r Result) string {
			if r.UsageBefore.RSSMB == 0 {
				return "–"
			}
			return fmt.Sprintf("%.0f / %.0f / %.0f", r.UsageBefore.RSSMB, r.UsagePeak.RSSMB, r.UsageEnd.RSSMB)
		})
		row("goroutines before / peak / end", func(r Result) string {
			if r.UsageBefore.Goroutines == 0 {
				return "–"
			}
			return fmt.Sprintf("%d / %d / %d", r.UsageBefore.Goroutines, r.UsagePeak.Goroutines, r.UsageEnd.Goroutines)
		})
		row("Redis connections before / peak / end", func(r Result) string {
			if r.UsageBefore.RSSMB == 0 {
				return "–"
			}
			return fmt.Sprintf("%d / %d / %d", r.UsageBefore.RedisConns, r.UsagePeak.RedisConns, r.UsageEnd.RedisConns)
		})
		b.WriteString("\n")
	}
	return b.String()
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func kindsCell(p Phase) string {
	parts := make([]string, 0, kinds)
	for k := range kinds {
		parts = append(parts, fmt.Sprint(p.kinds[k]))
	}
	return strings.Join(parts, " / ")
}
