// Package shortdur writes a duration as time.ParseDuration reads it,
// without the zero units time.Duration.String adds: "1h", not "1h0m0s".
// The configuration's reference and the admin status page both use it.
package shortdur

import (
	"strings"
	"time"
)

// Format writes d without needless zero units: 15m, 5s, 1h, 1h2m3s.
func Format(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
