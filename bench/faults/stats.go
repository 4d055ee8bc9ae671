package faults

import (
	"slices"
	"time"
)

// Phase sums up the calls due in one interval of a run.
type Phase struct {
	Calls int `json:"calls"`
	// Within20ms and WithinDeadline are the shares of calls decided (OK or
	// OVER_LIMIT) within 20 ms, Envoy's default filter timeout, and within
	// the client's deadline.
	Within20ms     float64        `json:"within_20ms"`
	WithinDeadline float64        `json:"within_deadline"`
	P50ms          float64        `json:"p50_ms"`
	P99ms          float64        `json:"p99_ms"`
	Kinds          map[string]int `json:"kinds"`
	kinds          [kinds]int
}

// Summarize sums up the calls due in [from, to).
func Summarize(calls []Call, from, to, deadline time.Duration) Phase {
	var p Phase
	var lat []time.Duration
	var in20, inDL int
	for _, c := range calls {
		if c.At < from || c.At >= to {
			continue
		}
		p.Calls++
		p.kinds[c.Kind]++
		lat = append(lat, c.Latency)
		if c.Kind.Decided() {
			if c.Latency <= 20*time.Millisecond {
				in20++
			}
			if c.Latency <= deadline {
				inDL++
			}
		}
	}
	p.Kinds = map[string]int{}
	for k, n := range p.kinds {
		if n > 0 {
			p.Kinds[Kind(k).String()] = n
		}
	}
	if p.Calls == 0 {
		return p
	}
	p.Within20ms = float64(in20) / float64(p.Calls)
	p.WithinDeadline = float64(inDL) / float64(p.Calls)
	slices.Sort(lat)
	p.P50ms = ms(quantile(lat, 0.50))
	p.P99ms = ms(quantile(lat, 0.99))
	return p
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Normal is what a bin of calls must look like to count as back to normal:
// every call decided, and the bin's median latency within Median. The
// median, not the slowest call: on a shared machine a few calls of any bin
// are slow whatever the server does.
type Normal struct {
	Bin    time.Duration
	Median time.Duration
}

// BackToNormal is how long after cleared the calls are back to normal:
// the start of the first bin (of n.Bin, from cleared) after which every bin
// up to end is normal, measured from cleared. ok is false if the calls were
// not back to normal by end. A bin with no calls is normal.
func BackToNormal(calls []Call, cleared, end time.Duration, n Normal) (_ time.Duration, ok bool) {
	bins := int((end - cleared + n.Bin - 1) / n.Bin)
	if bins <= 0 {
		return 0, false
	}
	bad := make([]bool, bins)
	lats := make([][]time.Duration, bins)
	for _, c := range calls {
		if c.At < cleared || c.At >= end {
			continue
		}
		i := int((c.At - cleared) / n.Bin)
		lats[i] = append(lats[i], c.Latency)
		if !c.Kind.Decided() {
			bad[i] = true
		}
	}
	for i, l := range lats {
		slices.Sort(l)
		if quantile(l, 0.5) > n.Median {
			bad[i] = true
		}
	}
	for i := bins - 1; i >= 0; i-- {
		if bad[i] {
			if i == bins-1 {
				return 0, false
			}
			return time.Duration(i+1) * n.Bin, true
		}
	}
	return 0, true
}

// OverAdmitted is how many calls on the hot key were allowed beyond limit:
// the key is driven over its limit before the fault, so every OK past the
// first limit is one too many.
func OverAdmitted(calls []Call, limit int) int {
	ok := 0
	for _, c := range calls {
		if c.Hot && c.Kind == OK {
			ok++
		}
	}
	return max(ok-limit, 0)
}

// Bin is one interval of a timeline: the calls due in it, by kind, and
// their p99.
type Bin struct {
	At    float64    `json:"at_s"`
	P99ms float64    `json:"p99_ms"`
	Kinds [kinds]int `json:"kinds"`
}

// Timeline cuts the calls into bins of width w, up to end.
func Timeline(calls []Call, end, w time.Duration) []Bin {
	n := int((end + w - 1) / w)
	bins := make([]Bin, n)
	lats := make([][]time.Duration, n)
	for _, c := range calls {
		i := int(c.At / w)
		if i >= n {
			continue
		}
		bins[i].Kinds[c.Kind]++
		lats[i] = append(lats[i], c.Latency)
	}
	for i := range bins {
		bins[i].At = (time.Duration(i) * w).Seconds()
		slices.Sort(lats[i])
		bins[i].P99ms = ms(quantile(lats[i], 0.99))
	}
	return bins
}
