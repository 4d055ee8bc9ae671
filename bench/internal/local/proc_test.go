package local

import "testing"

func TestParseStatTicks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		stat    string
		want    uint64
		wantErr bool
	}{
		{"plain", "4242 (ratelimit-sidec) S 1 4242 4242 0 -1 4194560 2391 0 0 0 1234 567 0 0 20 0 9 0 12345 1264406528 5120 18446744073709551615", 1801, false},
		{"name with spaces and parens", "7 (a b) (c)) R 1 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 5 0 0", 30, false},
		{"truncated", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 10", 0, true},
		{"no name", "7 x R", 0, true},
		{"bad number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 ten 20 0", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseStatTicks([]byte(tt.stat))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseStatTicks() = %d, %v, want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
