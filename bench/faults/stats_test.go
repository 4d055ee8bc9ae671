package faults

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	calls := []Call{
		{At: 0, Latency: 1 * ms, Kind: OK},
		{At: 10 * ms, Latency: 30 * ms, Kind: OK},         // decided, not within 20 ms
		{At: 20 * ms, Latency: 2 * ms, Kind: Unavailable}, // fast, not decided
		{At: 30 * ms, Latency: 1500 * ms, Kind: Deadline}, // past the deadline
		{At: 40 * ms, Latency: 5 * ms, Kind: OverLimit},   // decided
		{At: 100 * ms, Latency: 1 * ms, Kind: OK},         // outside the phase
	}
	p := Summarize(calls, 0, 100*ms, time.Second)
	if p.Calls != 5 || p.Within20ms != 2.0/5 || p.WithinDeadline != 3.0/5 {
		t.Errorf("calls %d, within 20ms %v, within deadline %v; want 5, 0.4, 0.6", p.Calls, p.Within20ms, p.WithinDeadline)
	}
	if p.P50ms != 5 || p.P99ms != 1500 {
		t.Errorf("p50 %v p99 %v, want 5 and 1500", p.P50ms, p.P99ms)
	}
	if p.Kinds["OK"] != 2 || p.Kinds["Unavailable"] != 1 || p.Kinds["deadline"] != 1 || p.Kinds["OVER_LIMIT"] != 1 {
		t.Errorf("kinds %v", p.Kinds)
	}
}

func TestBackToNormal(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	n := Normal{Bin: 100 * ms, Median: 20 * ms}
	for _, tt := range []struct {
		name  string
		calls []Call
		want  time.Duration
		ok    bool
	}{
		{"normal at once", []Call{{At: 50 * ms, Latency: ms, Kind: OK}}, 0, true},
		{"an error then normal", []Call{{At: 150 * ms, Kind: Unavailable}, {At: 250 * ms, Latency: ms, Kind: OK}}, 200 * ms, true},
		{"slow then normal", []Call{{At: 320 * ms, Latency: 21 * ms, Kind: OK}, {At: 450 * ms, Latency: ms, Kind: OK}}, 400 * ms, true},
		{"one slow call in a fast bin", []Call{{At: 310 * ms, Latency: 900 * ms, Kind: OK}, {At: 320 * ms, Latency: ms, Kind: OK}, {At: 330 * ms, Latency: ms, Kind: OK}}, 0, true},
		{"bad in the last bin", []Call{{At: 950 * ms, Kind: Deadline}}, 0, false},
		{"bad, good, bad again", []Call{{At: 50 * ms, Kind: Deadline}, {At: 150 * ms, Kind: OK}, {At: 550 * ms, Kind: Deadline}}, 600 * ms, true},
	} {
		got, ok := BackToNormal(tt.calls, 0, time.Second, n)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: BackToNormal = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestOverAdmitted(t *testing.T) {
	t.Parallel()
	calls := []Call{{Hot: true, Kind: OK}, {Hot: true, Kind: OK}, {Hot: true, Kind: OverLimit}, {Kind: OK}, {Hot: true, Kind: Unavailable}}
	for _, tt := range []struct{ limit, want int }{{0, 2}, {1, 1}, {5, 0}} {
		if got := OverAdmitted(calls, tt.limit); got != tt.want {
			t.Errorf("OverAdmitted(limit %d) = %d, want %d", tt.limit, got, tt.want)
		}
	}
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	bins := Timeline([]Call{{At: 10 * ms, Latency: 3 * ms, Kind: OK}, {At: 260 * ms, Latency: 9 * ms, Kind: Unavailable}, {At: 2 * time.Second}}, 500*ms, 250*ms)
	if len(bins) != 2 || bins[0].Kinds[OK] != 1 || bins[1].Kinds[Unavailable] != 1 || bins[1].P99ms != 9 || bins[1].At != 0.25 {
		t.Errorf("timeline %+v", bins)
	}
}
