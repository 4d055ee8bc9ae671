package window

import (
	"testing"
	"time"
)

func TestAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nowMs int64
		size  time.Duration
		want  Window
	}{
		{"start of minute", 120_000, time.Minute, Window{120_000, 60_000}},
		{"inside minute", 179_999, time.Minute, Window{120_000, 60_000}},
		{"90 s window", 100_000, 90 * time.Second, Window{90_000, 90_000}},
		{"before epoch floors", -1, time.Second, Window{-1000, 1000}},
		{"week starts on a Thursday", time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixMilli(), 7 * 24 * time.Hour,
			Window{time.Date(2026, 11, 19, 0, 0, 0, 0, time.UTC).UnixMilli(), 7 * 24 * 3600_000}},
		{"sub-millisecond size rounds up to 1 ms", 5, time.Microsecond, Window{5, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AtMillis(tt.nowMs, tt.size.Milliseconds())
			if got != tt.want {
				t.Errorf("AtMillis(%d, %v) = %+v, want %+v", tt.nowMs, tt.size, got, tt.want)
			}
		})
	}
	if wd := time.UnixMilli(At(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), Week.Duration()).Start).UTC().Weekday(); wd != time.Thursday {
		t.Errorf("week window starts on %v, want Thursday", wd)
	}
}

func TestWindowUntilAndPrevious(t *testing.T) {
	t.Parallel()
	w := Window{Start: 60_000, Size: 60_000}
	for _, tt := range []struct {
		now   int64
		until time.Duration
	}{
		{60_000, time.Minute},
		{90_000, 30 * time.Second},
		{119_999, time.Millisecond},
		{200_000, 0},
	} {
		if got := w.Until(tt.now); got != tt.until {
			t.Errorf("Until(%d) = %v, want %v", tt.now, got, tt.until)
		}
	}
	if got, want := w.Previous(), (Window{0, 60_000}); got != want {
		t.Errorf("Previous() = %+v, want %+v", got, want)
	}
}

func TestParseUnitAndSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		unit Unit
		mult uint64
		size time.Duration
		bad  bool
	}{
		{in: "second", unit: Second, mult: 90, size: 90 * time.Second},
		{in: "MINUTE", unit: Minute, mult: 0, size: time.Minute},
		{in: "Hour", unit: Hour, mult: 1, size: time.Hour},
		{in: "day", unit: Day, mult: 2, size: 48 * time.Hour},
		{in: "week", unit: Week, mult: 1, size: 7 * 24 * time.Hour},
		{in: "month", unit: Month, mult: 1, size: 2592000 * time.Second},
		{in: "year", unit: Year, mult: 100, size: MaxSize},
		{in: "year", unit: Year, mult: 101, bad: true},
		{in: "fortnight", bad: true},
		{in: "", bad: true},
	} {
		u, err := ParseUnit(tt.in)
		if tt.unit == 0 {
			if err == nil {
				t.Errorf("ParseUnit(%q) = %v, want an error", tt.in, u)
			}
			continue
		}
		if err != nil || u != tt.unit {
			t.Errorf("ParseUnit(%q) = %v, %v, want %v", tt.in, u, err, tt.unit)
			continue
		}
		size, err := Size(u, tt.mult)
		if tt.bad {
			if err == nil {
				t.Errorf("Size(%v, %d) = %v, want an error", u, tt.mult, size)
			}
			continue
		}
		if err != nil || size != tt.size {
			t.Errorf("Size(%v, %d) = %v, %v, want %v", u, tt.mult, size, err, tt.size)
		}
	}
	if _, err := Size(0, 1); err == nil {
		t.Error("Size(0, 1) succeeded, want an error")
	}
}

// FuzzAt checks the window invariant for any time and size: the window holds
// now, starts on a multiple of its size, and the reset is within one window.
func FuzzAt(f *testing.F) {
	f.Add(int64(0), int64(1))
	f.Add(int64(1_763_800_000_123), int64(60_000))
	f.Add(int64(-1), int64(7))
	f.Add(int64(-9_000_000_000_000), int64(MaxSize/time.Millisecond))
	f.Fuzz(func(t *testing.T, nowMs, sizeMs int64) {
		if sizeMs <= 0 || sizeMs > int64(MaxSize/time.Millisecond) {
			sizeMs = 1 + (sizeMs&0x7fffffffffff)%int64(MaxSize/time.Millisecond)
		}
		// Keep now where Start+Size cannot overflow: ±10,000 years.
		nowMs %= 10_000 * 365 * 24 * 3600 * 1000
		w := AtMillis(nowMs, sizeMs)
		if !(w.Start <= nowMs && nowMs < w.End()) {
			t.Fatalf("AtMillis(%d, %d) = %+v does not hold now", nowMs, sizeMs, w)
		}
		if w.Start%sizeMs != 0 {
			t.Fatalf("AtMillis(%d, %d).Start = %d, not a multiple of the size", nowMs, sizeMs, w.Start)
		}
		if u := w.Until(nowMs); u <= 0 || u > time.Duration(sizeMs)*time.Millisecond {
			t.Fatalf("Until = %v, want in (0, %d ms]", u, sizeMs)
		}
	})
}
