package harness

import (
	"net"
)

const Burst3 = `
[listen]
unix = "%SOCK%"
unix_mode = "0600"
[limit]
rate = 0.001
burst = 3
`

func ReadFull(c net.Conn, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
