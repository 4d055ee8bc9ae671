package window_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func ExampleAt() {
	now := time.Date(2026, 11, 22, 10, 30, 45, 0, time.UTC)
	w := window.At(now, 90*time.Second)
	fmt.Println(time.UnixMilli(w.Start).UTC().Format(time.TimeOnly), w.Until(now.UnixMilli()))
	// Output: 10:30:00 45s
}

func ExampleAppendKeyHead() {
	key := window.AppendKeyHead(nil, "ratelimit", "edge")
	key = window.AppendKeyEntry(key, "api_key", "alice")
	key = window.AppendKeyEntry(key, "path", "/v1|x")
	key = window.AppendKeyEnd(key)
	key = window.AppendWindow(key, window.Window{Start: 1763800020000, Size: 60000})
	fmt.Println(string(key))
	// Output: ratelimit:{edge|api_key=alice|path=/v1%7Cx}:60000:1763800020000
}

// Each limit of a descriptor counts in its own counter; the first, when it
// is a fixed window, keeps the descriptor's key.
func ExampleAppendKeyCounter() {
	head := window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "ratelimit", "edge"), "api_key", "alice"))
	w := window.Window{Start: 1763800020000, Size: 60000}
	for i, a := range []window.Algorithm{window.FixedWindow, window.FixedWindow, window.SlidingWindow} {
		key := window.AppendKeyCounter(head, i, a)
		fmt.Println(string(window.AppendWindow(key, w)))
	}
	// Output:
	// ratelimit:{edge|api_key=alice}:60000:1763800020000
	// ratelimit:{edge|api_key=alice}!1:60000:1763800020000
	// ratelimit:{edge|api_key=alice}!2,sliding_window:60000:1763800020000
}

func ExampleMemory_Take() {
	m := window.NewMemory()
	now := time.UnixMilli(1763800020000)
	r := []window.Counter{{Key: "ratelimit:{edge|api_key=alice}", Limit: 2, Size: time.Minute, Hits: 1}}
	for range 3 {
		res := make([]window.Result, 1)
		ok, _ := m.Take(context.Background(), now, r, res)
		fmt.Println(ok, res[0].Count, r[0].Remaining(res[0], now))
	}
	// Output:
	// true 1 1
	// true 2 0
	// false 2 0
}
