package redisledger

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_764_158_400_123)
	for _, c := range []rlqs.ClientState{
		{},
		{Demand: 20000, Rate: 6568, Burst: 13, Expires: at, Reported: at},
		{Rate: 1, Burst: 2, PrevRate: 3, PrevBurst: 4, PrevUntil: at, Expires: at.Add(time.Hour), Estimated: true},
		{Demand: math.MaxUint64, Rate: math.MaxUint64, Burst: math.MaxUint64, PrevRate: math.MaxUint64, PrevBurst: math.MaxUint64},
		{Rate: 5, Burst: 2, Fleet: 144_000_000, Expires: at},
	} {
		s := string(appendState(nil, c))
		got, err := parseState(s)
		if err != nil {
			t.Fatalf("parseState(%q): %v", s, err)
		}
		if got.Demand != c.Demand || got.Rate != c.Rate || got.Burst != c.Burst || got.PrevRate != c.PrevRate ||
			got.PrevBurst != c.PrevBurst || !got.PrevUntil.Equal(c.PrevUntil) || !got.Expires.Equal(c.Expires) ||
			!got.Reported.Equal(c.Reported) || got.Estimated != c.Estimated || got.Fleet != c.Fleet {
			t.Fatalf("parseState(appendState(%+v)) = %+v", c, got)
		}
	}
}

// Times round outward to the millisecond: a share is never counted
// shorter than the ledger decided.
func TestStateRounding(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_764_158_400_123).Add(400 * time.Microsecond)
	got, err := parseState(string(appendState(nil, rlqs.ClientState{Expires: at, PrevUntil: at, Reported: at})))
	if err != nil {
		t.Fatal(err)
	}
	if got.Expires.Before(at) || got.PrevUntil.Before(at) || got.Reported.After(at) {
		t.Fatalf("Expires %v, PrevUntil %v (want ≥ %v), Reported %v (want ≤)", got.Expires, got.PrevUntil, at, got.Reported)
	}
}

func TestParseStateRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "1,2,3", "1,2,3,4,5,6,7,8,0,10,11", "1,2,3,4,5,6,7,8,2", "a,2,3,4,5,6,7,8,0", "1,2,3,4,5,6,7,8,", "-1,2,3,4,5,6,7,8,0",
		"1,2,3,4,5,6,7,8,0,", "1,2,3,4,5,6,7,8,0,x", "1,2,3,4,5,6,7,8,0,-1",
		"1,2,3,4,5,6,99999999999999999,8,0", // beyond year 2262
	} {
		if c, err := parseState(s); !errors.Is(err, errState) {
			t.Errorf("parseState(%q) = %+v, %v, want errState", s, c, err)
		}
	}
}

func TestParseSnapshot(t *testing.T) {
	t.Parallel()
	s, err := parseSnapshot([]any{"v", "7k2", "c:a", "1,2,3,4,5,6,7,8,0", "c:b:c", "0,0,0,0,0,0,0,0,1"})
	if err != nil {
		t.Fatal(err)
	}
	_, a := s.clients.Lookup("a")
	bcAt, bc := s.clients.Lookup("b:c")
	if s.version != "7k2" || s.clients.Len() != 2 || a.Rate != 2 || bcAt < 0 || !bc.Estimated {
		t.Fatalf("parseSnapshot = %+v", s)
	}
	for _, reply := range [][]any{{"v"}, {"v", ""}, {"z", "1"}, {"c:a", "bad"}, {"v", int64(1)}} {
		if _, err := parseSnapshot(reply); !errors.Is(err, errState) {
			t.Errorf("parseSnapshot(%v) = %v, want errState", reply, err)
		}
	}
}

// FuzzParseState: whatever a bucket's hash holds, parsing never panics, and
// what it accepts encodes back to a value that parses to the same state.
func FuzzParseState(f *testing.F) {
	f.Add("20000,6568,13,0,0,0,1764158415123,1764158400123,0")
	f.Add("0,0,0,0,0,0,0,0,1")
	f.Add("20000,6568,13,0,0,0,1764158415123,1764158400123,0,144000000")
	f.Add("18446744073709551615,1,2,3,4,5,6,7,0")
	f.Add("1,2,3")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseState(s)
		if err != nil {
			if !errors.Is(err, errState) {
				t.Fatalf("parseState(%q) = %v, want errState", s, err)
			}
			return
		}
		again, err := parseState(string(appendState(nil, c)))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", s, err)
		}
		if a, b := string(appendState(nil, again)), string(appendState(nil, c)); a != b {
			t.Fatalf("parseState(%q) = %+v, re-parsed %+v", s, c, again)
		}
	})
}

// FuzzParseSnapshot: whatever a bucket's hash holds (fields and values
// split from s by newlines), reading it never panics, and a read bucket
// holds only clients whose values parse alone.
func FuzzParseSnapshot(f *testing.F) {
	f.Add("v\n7k2\nc:a\n1,2,3,4,5,6,7,8,0")
	f.Add("c:\n0,0,0,0,0,0,0,0,1\nv\nx")
	f.Add("v")
	f.Fuzz(func(t *testing.T, s string) {
		var reply []any
		for _, p := range strings.Split(s, "\n") {
			reply = append(reply, p)
		}
		snap, err := parseSnapshot(reply)
		if err != nil {
			if !errors.Is(err, errState) {
				t.Fatalf("parseSnapshot(%q) = %v, want errState", s, err)
			}
			return
		}
		for i := 0; i+1 < len(reply); i += 2 {
			if field := reply[i].(string); strings.HasPrefix(field, clientPrefix) {
				if _, err := parseState(reply[i+1].(string)); err != nil {
					t.Fatalf("parseSnapshot(%q) accepted %q: %v", s, field, err)
				}
				if i, _ := snap.clients.Lookup(field[len(clientPrefix):]); i < 0 {
					t.Fatalf("parseSnapshot(%q) lost client %q", s, field)
				}
			}
		}
	})
}
