package window

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Unit is the base length of a window. The zero Unit is invalid.
//
// Weeks, months and years are fixed lengths, not calendar periods: a week is
// 7 days, a month 30 days (Envoy counts a month as 2592000 s too) and a year
// 365 days. Because windows are aligned to the Unix epoch, which fell on a
// Thursday, week windows start on Thursdays at 00:00 UTC; month and year
// windows start every 30 and 365 days after 1970-01-01 UTC, not on the 1st.
type Unit uint8

// The units of envoyproxy/ratelimit's rules, in Envoy's RateLimitUnit order
// where Envoy has them.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

var unitLengths = [...]time.Duration{
	Second: time.Second,
	Minute: time.Minute,
	Hour:   time.Hour,
	Day:    24 * time.Hour,
	Week:   7 * 24 * time.Hour,
	Month:  30 * 24 * time.Hour,
	Year:   365 * 24 * time.Hour,
}

// ErrBadWindow reports a unit, multiplier or size that makes no window.
var ErrBadWindow = errors.New("window: bad window")

// MaxSize is the longest window a store accepts: 100 years. It keeps every
// millisecond sum in the stores far from int64 overflow.
const MaxSize = 100 * 365 * 24 * time.Hour

// ParseUnit returns the Unit named s, in any case ("minute", "MINUTE").
func ParseUnit(s string) (Unit, error) {
	for u, name := range unitNames {
		if name != "" && strings.EqualFold(s, name) {
			return Unit(u), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown unit %q (want second, minute, hour, day, week, month or year)", ErrBadWindow, s)
}

// String returns the lower-case name of u, or "unit(N)" for an invalid one.
func (u Unit) String() string {
	if u == 0 || int(u) >= len(unitNames) {
		return fmt.Sprintf("unit(%d)", uint8(u))
	}
	return unitNames[u]
}

// Duration returns the length of one u, or 0 for an invalid unit.
func (u Unit) Duration() time.Duration {
	if u == 0 || int(u) >= len(unitLengths) {
		return 0
	}
	return unitLengths[u]
}

// Size returns the length of a window of multiplier units. A multiplier of 0
// means 1, as an unset unit_multiplier does. It fails for an invalid unit or
// a size above MaxSize.
func Size(u Unit, multiplier uint64) (time.Duration, error) {
	d := u.Duration()
	if d == 0 {
		return 0, fmt.Errorf("%w: %v", ErrBadWindow, u)
	}
	if multiplier == 0 {
		multiplier = 1
	}
	if multiplier > uint64(MaxSize/d) {
		return 0, fmt.Errorf("%w: %d x %v is longer than %v", ErrBadWindow, multiplier, u, MaxSize)
	}
	return d * time.Duration(multiplier), nil
}

// Window is one fixed window: the half-open interval [Start, Start+Size) in
// Unix milliseconds. The zero Window is empty and invalid.
type Window struct {
	Start int64 // Unix milliseconds, a multiple of Size
	Size  int64 // milliseconds, > 0
}

// At returns the window of the given size (at least 1 ms; shorter sizes are
// rounded up) that holds now. Windows are aligned to the Unix epoch, also for
// times before it, so Start <= now < Start+Size always holds.
func At(now time.Time, size time.Duration) Window {
	return AtMillis(now.UnixMilli(), size.Milliseconds())
}

// AtMillis is At for a time and size in milliseconds.
func AtMillis(nowMs, sizeMs int64) Window {
	if sizeMs < 1 {
		sizeMs = 1
	}
	rem := nowMs % sizeMs
	if rem < 0 { // floor, not truncation, before 1970
		rem += sizeMs
	}
	return Window{Start: nowMs - rem, Size: sizeMs}
}

// End returns the first millisecond after w.
func (w Window) End() int64 { return w.Start + w.Size }

// Previous returns the window just before w.
func (w Window) Previous() Window { return Window{Start: w.Start - w.Size, Size: w.Size} }

// Until returns the time from nowMs to the end of w; 0 if w has ended.
func (w Window) Until(nowMs int64) time.Duration {
	d := w.End() - nowMs
	if d < 0 {
		return 0
	}
	return time.Duration(d) * time.Millisecond
}
