package shortdur

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{10 * time.Millisecond, "10ms"},
		{5 * time.Second, "5s"},
		{15 * time.Minute, "15m"},
		{time.Hour, "1h"},
		{time.Hour + 2*time.Minute, "1h2m"},
		{time.Hour + 2*time.Minute + 3*time.Second, "1h2m3s"},
		{time.Hour + 3*time.Second, "1h0m3s"},
		{90 * time.Second, "1m30s"},
		{1500 * time.Millisecond, "1.5s"},
	} {
		if got := Format(tc.d); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
